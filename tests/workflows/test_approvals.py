"""Approval gates: the update and its validator, the signal, and each gate's safe default."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
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
from workflows.types import SIGNAL_APPROVE, UPDATE_APPROVE, ApprovalInput, GateDecision

README = Path(__file__).resolve().parents[2] / "workflows" / "README.md"


def web_ui_json() -> dict[str, Any]:
    """The exact JSON value the README tells an operator to paste into the Web UI."""
    block = re.search(r"```json\n(.*?)\n```", README.read_text(), re.S)
    assert block is not None
    value = json.loads(block.group(1))
    assert isinstance(value, dict)
    return value


async def test_approve_rejects_unknown_decided_and_anonymous_approvals_and_takes_the_web_ui_json(
    local_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=4, warm=0)
    fleet.kill(f"{fleet.pool}-1")
    client = local_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, f"{fleet.pool}-1"))
        await wait_for_gate(handle, "provision")
        bad = [
            ApprovalInput(gate="provison", approver="alice"),
            ApprovalInput(gate="provision", approver="  "),
        ]
        for request in bad:
            with pytest.raises(WorkflowUpdateFailedError) as rejected:
                await handle.execute_update(UPDATE_APPROVE, request, result_type=GateDecision)
            assert "gate" in str(rejected.value.cause) or "approver" in str(rejected.value.cause)
        decision = await handle.execute_update(
            UPDATE_APPROVE, web_ui_json(), result_type=GateDecision
        )
        assert decision == GateDecision(gate="provision", outcome="approved", approver="alice")
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await handle.execute_update(
                UPDATE_APPROVE,
                ApprovalInput(gate="provision", approver="bob"),
                result_type=GateDecision,
            )
        assert "already decided: approved by alice" in str(again.value.cause)
        result = await handle.result()
        status = await status_of(handle)
    assert result.outcome == "recovered"
    assert fleet.replicas == 5
    gate_entries = [e for e in status.timeline if e.step == "gate"]
    assert [e.outcome for e in gate_entries] == ["provision: approved"]
    assert gate_entries[0].evidence["reason"] == "lead time accepted"


async def test_the_approve_signal_decides_a_gate_and_an_invalid_one_is_recorded_and_ignored(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=4, warm=0)
    fleet.kill(f"{fleet.pool}-2")
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, f"{fleet.pool}-2"))
        await wait_for_gate(handle, "provision")
        await handle.signal(SIGNAL_APPROVE, ApprovalInput(gate="provision", approver=""))
        await handle.signal(SIGNAL_APPROVE, ApprovalInput(gate="provision", approver="carol"))
        await handle.result()
        status = await status_of(handle)
    assert fleet.replicas == 5
    ignored = [e for e in status.timeline if e.step == "approval-ignored"]
    assert len(ignored) == 1 and "approver" in ignored[0].outcome
    assert [e.outcome for e in status.timeline if e.step == "gate"] == ["provision: approved"]


def lose(fleet: Fleet, *indexes: int) -> list[str]:
    pods = [f"{fleet.pool}-{i}" for i in indexes]
    for pod in pods:
        fleet.kill(pod)
    return pods


GATE_CASES = ["provision", "shed-tier", "force-delete", "blast-radius"]


@pytest.mark.parametrize("kind", GATE_CASES)
async def test_an_unanswered_gate_times_out_to_its_safe_default_and_says_so_in_the_timeline(
    ts_env: WorkflowEnvironment, task_queue: str, kind: str
) -> None:
    fleet = new_fleet(serving=8, warm=0 if kind == "provision" else 1)
    pods = lose(fleet, 0, 1, 2) if kind == "blast-radius" else lose(fleet, 5)
    if kind == "shed-tier":
        fleet.wanted_tier = 4
    if kind == "force-delete":
        fleet.deroute_confirms = False
    gate = {
        "provision": lambda: "provision",
        "shed-tier": lambda: "shed-tier/D4",
        "force-delete": lambda: f"force-delete/{pods[0]}",
        "blast-radius": lambda: f"blast-radius/{pods[2]}",
    }[kind]()
    client = ts_env.client
    # Every loss is in the history before a worker runs: with instant fake activities an
    # incident could otherwise close before a late signal arrives.
    handle = await report_loss(client, task_queue, fleet, loss_of(fleet, pods[0]))
    for pod in pods[1:]:
        await handle.signal("replica_lost", loss_of(fleet, pod))
    async with running_worker(client, task_queue, fleet):
        # Waiting on the result lets the test server skip time, so the gate opens and times
        # out within it; what it offered is read back from the timeline, not raced for.
        result = await handle.result()
        status = await status_of(handle)
    (opened,) = [e for e in status.timeline if e.step == "gate-opened" and e.outcome == gate]
    assert opened.evidence["would_do"] and opened.evidence["on_timeout"]
    on_timeout = str(opened.evidence["on_timeout"])
    assert [e.outcome for e in status.timeline if e.step == "gate"] == [f"{gate}: timed-out"]
    assert result.outcome.startswith("recovered")
    if kind == "provision":
        assert fleet.replicas == 8
        assert "nothing is scaled" in on_timeout
    elif kind == "shed-tier":
        assert fleet.shed_tier == 0  # rolled back from the automatic D2, never D4
        assert not any("/shed-tier/D4" in op for op in fleet.applied)
    elif kind == "force-delete":
        assert pods[0] in fleet.pods
        assert not any("force-delete" in op for op in fleet.applied)
    else:
        assert fleet.pods[pods[2]].routed is True
        assert [fleet.pods[p].routed for p in pods[:2]] == [False, False]
        decision = [e for e in status.timeline if e.step == "blast-radius"]
        assert [e.outcome for e in decision] == ["within", "within", "beyond"]
        assert decision[2].evidence["limit"] == 0.25
        assert decision[2].evidence["capacity_out_after"] == 0.375


async def test_an_approved_escalation_is_rolled_back_newest_first_each_to_the_tier_beneath(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    fleet.kill(f"{fleet.pool}-4")
    fleet.wanted_tier = 4
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, f"{fleet.pool}-4"))
        await wait_for_gate(handle, "shed-tier/D4")
        await handle.signal(SIGNAL_APPROVE, ApprovalInput(gate="shed-tier/D4", approver="carol"))
        result = await handle.result()
    assert result.outcome == "recovered"
    # Automatic D2, approved D4; then D4 back to D2 and D2 back to none.
    assert fleet.shed_tier_writes == [2, 4, 2, 0]
    restores = [op for name, op in fleet.calls if name == "restore_shed_tier"]
    assert [op.rsplit("/", 1)[-1] for op in restores if op] == ["D4", "shed-tier"]
