"""A failure at any step, an abort or a cancellation leaves the fleet as it was.

The one exception is the point of the incident: the dead replica stays derouted (a dead
endpoint is never routed back), and a node that triage quarantined stays cordoned until it
passes qualification. Every effect and every undo is applied at most once, counted by the
fake fleet rather than by the ledger.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment

from tests.workflows.fakes import Fleet
from tests.workflows.harness import (
    loss_of,
    new_fleet,
    report_loss,
    running_worker,
    status_of,
    wait_for_gate,
)
from workflows.types import (
    SIGNAL_ABORT,
    SIGNAL_APPROVE,
    AbortRequest,
    ApprovalInput,
    IncidentStatus,
)


def fail_at(activity: str, op_part: str | None = None) -> Any:
    def predicate(name: str, request: BaseModel) -> bool:
        if name != activity:
            return False
        return op_part is None or op_part in (getattr(request, "op_id", "") or "")

    return predicate


def as_before_except_the_dead_replica(
    before: dict[str, Any], fleet: Fleet, dead: str
) -> dict[str, Any]:
    expected = copy.deepcopy(before)
    if any("/deroute/" in op for op in fleet.applied):
        expected["pods"][dead]["routed"] = False
    node = fleet.pods[dead].node
    if any(f"/triage/{node}" in op for op in fleet.applied):
        expected["nodes"][node].update(cordoned=True, qualified=False)
    return expected


async def approve_then_fail(
    env: WorkflowEnvironment, task_queue: str, fleet: Fleet, dead: str, gate: str
) -> IncidentStatus:
    """Report `dead` lost, approve `gate` when it opens; the incident must then fail."""
    async with running_worker(env.client, task_queue, fleet):
        handle = await report_loss(env.client, task_queue, fleet, loss_of(fleet, dead))
        await wait_for_gate(handle, gate)
        await handle.signal(SIGNAL_APPROVE, ApprovalInput(gate=gate, approver="alice"))
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        return await status_of(handle)


WARM_CASES = [
    ("assess", "assess_loss", None),
    ("deroute", "read_routing_state", None),
    ("deroute", "deroute_replica", None),
    ("protect", "read_pressure", None),
    ("protect", "apply_shed_tier", None),
    ("inflight", "apply_retry_contract", None),
    ("promote-warm", "promote_warm", None),
    ("rebuild-warm-floor", "find_warm_workload", None),
    ("rebuild-warm-floor", "scale_pool", None),
    ("reschedule", "diagnose_pending", None),
    ("triage", "triage_node", None),
    ("ramp", "warm_up_replica", None),
    ("ramp", "ramp_traffic", None),
    ("verify", "verify_capacity", None),
    ("verify", "verify_serving", None),
    ("roll-back", "restore_shed_tier", "/roll-back/"),
]


@pytest.mark.parametrize(
    ("step", "activity", "op_part"), WARM_CASES, ids=[f"{c[0]}:{c[1]}" for c in WARM_CASES]
)
async def test_a_failure_at_each_step_leaves_the_fleet_as_before_except_the_dead_replica(
    ts_env: WorkflowEnvironment, task_queue: str, step: str, activity: str, op_part: str | None
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead = f"{fleet.pool}-3"
    fleet.kill(dead)
    before = fleet.snapshot()
    fleet.fail = fail_at(activity, op_part)
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, dead))
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        status = await status_of(handle)
    assert fleet.snapshot() == as_before_except_the_dead_replica(before, fleet, dead)
    assert all(count == 1 for count in fleet.applied.values()), fleet.applied
    assert status.outcome == "compensated"
    failed = [e for e in status.timeline if e.step == step and e.outcome.startswith("failed")]
    assert failed, [(e.step, e.outcome) for e in status.timeline]
    assert f"injected failure in {activity}" in failed[0].outcome
    assert any(e.step == "compensate" for e in status.timeline)


@pytest.mark.parametrize("activity", ["scale_pool", "verify_capacity"])
async def test_an_approved_provisioning_is_scaled_back_when_a_later_step_fails(
    ts_env: WorkflowEnvironment, task_queue: str, activity: str
) -> None:
    fleet = new_fleet(serving=4, warm=0)
    dead = f"{fleet.pool}-1"
    fleet.kill(dead)
    before = fleet.snapshot()
    fleet.fail = fail_at(activity)
    await approve_then_fail(ts_env, task_queue, fleet, dead, "provision")
    assert fleet.snapshot() == as_before_except_the_dead_replica(before, fleet, dead)
    if activity == "verify_capacity":
        # The scale-up did happen, and was undone exactly once.
        assert [op for op in fleet.applied if "/provision/" in op and "compensate" not in op]
        assert [op for op in fleet.applied if op.endswith("/compensate") and "/provision/" in op]
    assert all(count == 1 for count in fleet.applied.values())


async def test_an_operators_abort_unwinds_the_saga_and_closes_the_incident_as_aborted(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=4, warm=0)
    dead = f"{fleet.pool}-0"
    fleet.kill(dead)
    before = fleet.snapshot()
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, dead))
        await wait_for_gate(handle, "provision")
        assert fleet.shed_tier == 2
        await handle.signal(SIGNAL_ABORT, AbortRequest(requested_by="bob", reason="drill"))
        result = await handle.result()
        status = await status_of(handle)
    assert result.outcome == "aborted"
    assert fleet.snapshot() == as_before_except_the_dead_replica(before, fleet, dead)
    assert status.timeline[-1].step == "closed"
    unwind = next(e for e in status.timeline if e.step == "compensate")
    assert "aborted by bob: drill" in unwind.evidence["why"]
    gate = next(e for e in status.timeline if e.step == "gate")
    assert gate.outcome == "provision: aborted"


async def test_cancelling_the_incident_unwinds_the_saga_before_it_ends(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=4, warm=0)
    dead = f"{fleet.pool}-2"
    fleet.kill(dead)
    before = fleet.snapshot()
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, dead))
        await wait_for_gate(handle, "provision")
        assert fleet.shed_tier == 2
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        status = await status_of(handle)
    assert isinstance(failure.value.cause, CancelledError)
    assert status.outcome == "cancelled"
    assert fleet.snapshot() == as_before_except_the_dead_replica(before, fleet, dead)
    assert all(count == 1 for count in fleet.applied.values())


async def test_an_approved_escalation_is_undone_to_the_tier_beneath_then_to_none_when_a_later_step_fails(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    # Pressure wants D4, beyond the automatic D2; the step after it fails.
    fleet.wanted_tier, fleet.fail = 4, fail_at("promote_warm")
    fleet.kill(f"{fleet.pool}-4")
    status = await approve_then_fail(ts_env, task_queue, fleet, f"{fleet.pool}-4", "shed-tier/D4")
    # Each emergency measure has its own undo, so the ledger links each to what undid it.
    assert fleet.shed_tier_writes == [2, 4, 2, 0]
    undone = {c.forward_op_id.rsplit("/protect/", 1)[-1]: c.done for c in status.compensations}
    assert {k: v for k, v in undone.items() if k.startswith("shed-tier")} == {
        "shed-tier": True,
        "shed-tier/D4": True,
    }
    assert all(count == 1 for count in fleet.applied.values()), fleet.applied
