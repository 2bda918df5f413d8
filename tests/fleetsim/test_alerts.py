"""The alerts each fault implies: derivable from the scenario, and mapped by fleetmend's
intake to the lost replica they describe."""

from __future__ import annotations

import asyncio
from typing import get_args

from fleetsim.clock import ManualClock, ScaledClock
from fleetsim.faults import ALERTS, expected_alerts
from fleetsim.fleet import Fleet
from fleetsim.kube import pods as kpods
from fleetsim.scenario import bundled_scenarios, load_scenario
from tests.fleetsim.conftest import until
from worker.alerts import (
    DEFAULT_FAULT_BY_ALERTNAME,
    LabelMapping,
    MappedFiring,
    derive_fault,
    map_alert,
)
from workflows.types import FaultKind


def test_every_bundled_fault_states_its_alert_with_a_fault_the_workflow_knows() -> None:
    seen = set()
    for name in bundled_scenarios():
        for fault in load_scenario(name).faults:
            for labels in expected_alerts(fault):
                seen.add(fault.kind)
                assert labels["fault"] in get_args(FaultKind), (name, labels)
                # The alertname alone leads the intake to the same fault.
                assert (
                    derive_fault(labels["alertname"], DEFAULT_FAULT_BY_ALERTNAME) == labels["fault"]
                )
                if fault.target.pool is not None:
                    assert labels["pool"] == fault.target.pool
    # Every fault kind that fires an alert is exercised by some bundled scenario.
    assert seen == {k for k, spec in ALERTS.items() if spec is not None}


async def test_rack_outage_fires_one_alert_per_lost_replica_all_in_rack_1() -> None:
    scenario = load_scenario("rack-outage")
    async with Fleet(scenario, clock=ScaledClock(20), traffic=False) as fleet:
        injected = fleet.inject(scenario.faults[0])
        assert sorted(injected.nodes) == ["r1-gpu-0", "r1-gpu-1", "r1-gpu-2"]
        assert len(injected.alerts) == 3  # 3 of the 8 serving replicas; spares are elsewhere
        pods = {a.labels["pod"] for a in injected.alerts}
        assert len(pods) == 3
        await until(lambda: len(fleet.alerts()) == 3)
        mapping = LabelMapping()
        for i, alert in enumerate(fleet.alerts()):
            assert alert["labels"]["rack"] == "rack-1"
            mapped = map_alert(i, {"status": "firing", **alert}, mapping)
            assert isinstance(mapped, MappedFiring), mapped
            assert mapped.lost.namespace == "serving" and mapped.lost.pool == "inference-llm"
            assert mapped.lost.fault == "node-not-ready" and mapped.lost.pod in pods


async def test_a_node_alert_fires_only_once_the_node_controller_marks_the_node_not_ready() -> None:
    scenario = load_scenario("node-lost")
    clock = ManualClock()
    async with Fleet(scenario, clock=clock, traffic=False) as fleet:
        await clock.advance(1.0)  # every kubelet has posted its status once
        injected = fleet.inject(scenario.faults[0])
        (alert,) = injected.alerts
        node = alert.labels["node"]
        # The kubelet fell silent, but the rule reads the node's Ready condition: within
        # the node-monitor grace Prometheus has nothing to fire.
        for _ in range(30):
            await clock.advance(1.0)
            await asyncio.sleep(0.01)
        assert kpods.node_ready(fleet.store.get("nodes", node))
        assert fleet.firing(alert) == []
        assert fleet.alerts() == []
        for _ in range(15):
            await clock.advance(1.0)
            await asyncio.sleep(0.01)
        assert not kpods.node_ready(fleet.store.get("nodes", node))
        (fired,) = fleet.firing(alert)
        assert fired.labels == alert.labels
        # It starts when the node left Ready, after the fault, not at the fault.
        assert fired.starts_at > alert.starts_at
        assert [a["labels"]["pod"] for a in fleet.alerts()] == [alert.labels["pod"]]
