"""A mutating step that needed more than one attempt says so in its timeline entry.

An SRE reading `status` after a worker crash or a server restart sees which activity was
retried and which attempt finally applied it, next to the step it belongs to.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, status_of


def fails_first(activity: str, times: int) -> object:
    calls: list[str] = []

    def predicate(name: str, request: BaseModel) -> bool:
        if name == activity and len(calls) < times:
            calls.append(name)
            raise ApplicationError(f"transient failure {len(calls)} of {activity}")
        return False

    return predicate


async def test_a_retried_mutating_activity_shows_its_attempt_in_its_steps_entry(
    ts_env: WorkflowEnvironment,
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead = f"{fleet.pool}-3"
    fleet.kill(dead)
    fleet.fail = fails_first("apply_shed_tier", times=2)  # type: ignore[assignment]
    tq = f"retries-{uuid.uuid4()}"
    async with running_worker(ts_env.client, tq, fleet):
        handle = await report_loss(ts_env.client, tq, fleet, loss_of(fleet, dead))
        await handle.result()
        status = await status_of(handle)

    entries = {e.step: e for e in status.timeline}
    assert entries["protect"].retried == {"shed-tier": 3}
    assert entries["deroute"].retried == {}
    (shed,) = [e for e in status.effects if e.activity == "apply_shed_tier"]
    assert shed.attempt == 3
    assert all(e.attempt == 1 for e in status.effects if e.activity != "apply_shed_tier")
