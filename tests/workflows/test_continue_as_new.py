"""A long incident continues as new, carrying its saga and its timeline whole."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, status_of

RUNBOOK = [
    "assess",
    "deroute",
    "protect",
    "inflight",
    "hold-replacements",
    "promote-warm",
    "rebuild-warm-floor",
    "reschedule",
    "triage",
    "ramp",
    "verify",
    "roll-back",
]


async def test_a_small_history_limit_forces_continue_as_new_and_the_incident_still_completes_once(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead = f"{fleet.pool}-5"
    fleet.kill(dead)
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(
            client, task_queue, fleet, loss_of(fleet, dead), max_history_events=25
        )
        result = await handle.result()
        status = await status_of(handle)
    assert result.runs >= 3
    assert result.steps == RUNBOOK
    runs = [e for e in status.timeline if e.step == "continue-as-new"]
    assert len(runs) == result.runs - 1
    # The timeline of the first run survived into the last one.
    assert status.timeline[0].step == "opened"
    assert [e.step for e in status.timeline if e.step in RUNBOOK] == RUNBOOK
    assert all(count == 1 for count in fleet.applied.values())
    assert result.outcome == "recovered"


async def test_a_failure_after_continue_as_new_still_undoes_what_earlier_runs_applied(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead = f"{fleet.pool}-5"
    fleet.kill(dead)
    before = fleet.snapshot()

    def fail_verify(name: str, request: BaseModel) -> bool:
        return name == "verify_capacity"

    fleet.fail = fail_verify
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(
            client, task_queue, fleet, loss_of(fleet, dead), max_history_events=25
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        status = await status_of(handle)
    assert status.runs >= 3
    undone = {c.step for c in status.compensations if c.done}
    assert {"protect", "promote-warm"} <= undone
    assert fleet.shed_tier == before["shed_tier"]
    spare = f"{fleet.pool}-warm-0"
    assert fleet.pods[spare].routed is False and fleet.pods[spare].weight is None
