"""A replacement the pool's own controller started: held at the probe share while it loads,
ramped by measured rate once Ready; with ramping disabled, neither, and the timeline says so."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.workflows.fakes import Fleet, Pod
from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, status_of
from workflows.types import IncidentResult, IncidentStatus


def lost_with_a_replacement(
    *, same_node: bool = False, ready: bool = True
) -> tuple[Fleet, str, str]:
    """A pool of four that lost its fourth replica, whose controller already started another."""
    fleet = new_fleet(serving=4, warm=0)
    dead, replacement = f"{fleet.pool}-3", f"{fleet.pool}-3-new"
    fleet.kill(dead)
    node = fleet.pods[dead].node if same_node else f"gpu-{fleet.pool}-9"
    fleet.pods[replacement] = Pod(node=node, weight=None)
    fleet.replacements[replacement] = ready
    return fleet, dead, replacement


async def run_incident(
    env: WorkflowEnvironment, task_queue: str, fleet: Fleet, lost: str, **start: Any
) -> tuple[IncidentResult, IncidentStatus]:
    async with running_worker(env.client, task_queue, fleet):
        handle = await report_loss(env.client, task_queue, fleet, loss_of(fleet, lost), **start)
        result = await handle.result()
        return result, await status_of(handle)


async def test_a_controller_replacement_is_held_at_the_floor_share_then_ramped(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet, dead, replacement = lost_with_a_replacement()
    result, status = await run_incident(ts_env, task_queue, fleet, dead)
    hold = next(e for e in status.timeline if e.step == "hold-replacements")
    assert hold.evidence["held"] == [replacement]
    weights = hold.evidence["weights"]
    # Nothing measured before it is ready: the floor (1% of 1000); the survivors the rest.
    assert weights[replacement] == 10
    assert sorted(w for p, w in weights.items() if p != replacement) == [330, 330, 330]
    assert hold.evidence["hold_share"] == 0.01
    assert "floor" in hold.evidence["hold_share_why"]
    assert any(f"/hold-replacements/{fleet.pool}" in op for op in fleet.applied)
    # Its warm-up measured a warm rate (20 req/s of the pool's 80): the configured 10%.
    (sized,) = [e for e in status.timeline if e.step == "probe-share"]
    assert sized.evidence["pod"] == replacement
    assert sized.evidence["weight"] == 100
    assert sized.outcome == "10.0% (ceiling)"
    ramp = next(e for e in status.timeline if e.step == "ramp")
    assert ramp.evidence["final_weights"][replacement] == 250
    assert fleet.pods[replacement].weight == 250
    assert result.outcome in ("recovered", "recovered-measures-kept")


async def test_a_replacement_colder_than_the_probe_share_is_probed_at_what_it_serves(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet, dead, replacement = lost_with_a_replacement()
    # Its warm-up serves 3 req/s of the pool's 80: 80% of that is 3% of the traffic.
    fleet.warm_up_rates[replacement] = 3.0
    _, status = await run_incident(ts_env, task_queue, fleet, dead)
    (sized,) = [e for e in status.timeline if e.step == "probe-share"]
    assert sized.outcome == "3.0% (measured)"
    assert sized.evidence["served_per_s"] == 3.0
    assert sized.evidence["pool_per_s"] == 80.0
    assert "under the configured probe share of 10.0%" in sized.evidence["why"]
    assert any(op.endswith(f"/ramp/{replacement}/probe-1") for op in fleet.applied)
    assert [r.probe_share for r in fleet.ramp_inputs] == [pytest.approx(0.03)]


async def test_a_replacement_that_loads_for_longer_than_the_gate_timeout_is_awaited_and_ramped(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet, dead, replacement = lost_with_a_replacement()
    # Loading through the hold step and three polls of the ramp's wait (15 s apart).
    fleet.loading_polls[replacement] = 4
    _, status = await run_incident(
        ts_env, task_queue, fleet, dead, gate_timeout_s=5.0, replacement_wait_s=300.0
    )
    ramp = next(e for e in status.timeline if e.step == "ramp")
    assert ramp.evidence["replacements_ready"] == [replacement]
    assert ramp.evidence["still_loading"] == []
    assert [e.evidence["pod"] for e in status.timeline if e.step == "probe-share"] == [replacement]
    assert ramp.evidence["final_weights"][replacement] == 250


async def test_with_ramping_disabled_a_replacement_is_neither_held_nor_ramped_and_it_is_recorded(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet, dead, replacement = lost_with_a_replacement()
    _, status = await run_incident(ts_env, task_queue, fleet, dead, ramp=False)
    for step in ("hold-replacements", "ramp"):
        entry = next(e for e in status.timeline if e.step == step)
        assert "disabled" in entry.evidence["ramp"]
    assert not any("/hold-replacements/" in op or "/ramp/" in op for op in fleet.applied)
    assert "ramp_traffic" not in [name for name, _ in fleet.calls]
    assert fleet.pods[replacement].weight is None


async def test_losses_that_share_a_rollout_are_not_churned_by_scaling(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=4, warm=0)
    fleet.common_causes = ["rollout"]
    for pod in (f"{fleet.pool}-2", f"{fleet.pool}-3"):
        fleet.kill(pod)
    _, status = await run_incident(ts_env, task_queue, fleet, f"{fleet.pool}-3")
    (provision,) = [e for e in status.timeline if e.step == "provision"]
    assert "rollout" in provision.evidence["scale"]
    # No gate asked to scale, and nothing scaled: replicas of the bad revision would crash too.
    assert not any(e.step == "gate-opened" and "provision" in e.outcome for e in status.timeline)
    assert "scale_pool" not in [name for name, _ in fleet.calls]
    # Nor are healthy nodes cordoned for a fault that is in the software.
    assert "triage_node" not in [name for name, _ in fleet.calls]
    assert any(op.endswith("/notify/bad-rollout") for op in fleet.applied)


async def test_a_replacement_that_cannot_pull_its_image_is_not_waited_for(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet, dead, replacement = lost_with_a_replacement(ready=False)
    fleet.stuck[replacement] = "ImagePullBackOff"
    _, status = await run_incident(ts_env, task_queue, fleet, dead)
    ramp = next(e for e in status.timeline if e.step == "ramp")
    assert ramp.evidence["stuck"] == {replacement: "ImagePullBackOff"}
    assert ramp.evidence["still_loading"] == []
    # Asked once: a pull that fails does not succeed by polling until the gate timeout.
    assert [name for name, _ in fleet.calls].count("find_replacements") == 2


async def test_triage_refused_because_the_node_serves_again_skips_it_and_recovers(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The controller put the evicted pod's replacement on the same node, which serves again.
    fleet, dead, _ = lost_with_a_replacement(same_node=True)
    fleet.refuse = lambda name, request: name == "triage_node"
    result, status = await run_incident(ts_env, task_queue, fleet, dead)
    assert [e.outcome for e in status.timeline if e.step == "triage"][-1] == (
        "skipped: the node serves again"
    )
    assert result.outcome in ("recovered", "recovered-measures-kept")
    assert result.compensated == 0
    # Verification does not expect a node that serves again to be cordoned.
    assert fleet.verify_inputs
    assert all(fleet.pods[dead].node not in v.failed_nodes for v in fleet.verify_inputs)
