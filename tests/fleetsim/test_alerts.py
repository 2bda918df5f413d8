"""The alerts each fault implies: derivable from the scenario, and mapped by fleetmend's
intake to the lost replica they describe."""

from __future__ import annotations

from typing import get_args

from fleetsim.clock import ScaledClock
from fleetsim.faults import ALERTS, expected_alerts
from fleetsim.fleet import Fleet
from fleetsim.scenario import bundled_scenarios, load_scenario
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
        mapping = LabelMapping()
        for i, alert in enumerate(fleet.alerts()):
            assert alert["labels"]["rack"] == "rack-1"
            mapped = map_alert(i, {"status": "firing", **alert}, mapping)
            assert isinstance(mapped, MappedFiring), mapped
            assert mapped.lost.namespace == "serving" and mapped.lost.pool == "inference-llm"
            assert mapped.lost.fault == "node-not-ready" and mapped.lost.pod in pods
