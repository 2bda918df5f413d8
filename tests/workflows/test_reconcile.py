"""ReconcileWorkflow: the ledger's intent against what the fleet shows, with stored findings."""

from __future__ import annotations

import uuid
from datetime import timedelta

from temporalio.client import ScheduleActionStartWorkflow
from temporalio.testing import WorkflowEnvironment

from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, status_of
from workflows.reconcile import ReconcileWorkflow, reconcile_schedule, reconcile_workflow_id
from workflows.types import ReconcileInput, ReconcileReport


async def test_a_closed_incident_is_reconciled_and_its_findings_stored_and_in_the_timeline(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    fleet.kill(f"{fleet.pool}-3")
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, f"{fleet.pool}-3"))
        result = await handle.result()
        status = await status_of(handle)
        report = await client.get_workflow_handle(
            reconcile_workflow_id(result.incident_id), result_type=ReconcileReport
        ).result()
    assert report.operations == len(fleet.ledger) > 0
    assert report.findings == []
    assert [stored.incident_id for stored in fleet.findings] == [result.incident_id]
    closed = status.timeline[-1]
    assert closed.step == "closed" and closed.evidence["findings"] == []


async def test_an_effect_applied_twice_is_reported_as_a_duplicate(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=2, warm=0)
    fleet.ledger["i/deroute/p"] = None
    fleet.applied["i/deroute/p"] = 2
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        report = await client.execute_workflow(
            ReconcileWorkflow.run,
            ReconcileInput(incident_id="i"),
            id=f"reconcile/{uuid.uuid4()}",
            task_queue=task_queue,
        )
    assert [(f.kind, f.op_id) for f in report.findings] == [("duplicate", "i/deroute/p")]
    assert fleet.findings[0].findings == report.findings


async def test_the_reconciliation_schedule_sweeps_every_hour_and_skips_overlaps(
    local_env: WorkflowEnvironment, task_queue: str
) -> None:
    schedule_id = f"reconcile-{uuid.uuid4()}"
    handle = await local_env.client.create_schedule(schedule_id, reconcile_schedule(task_queue))
    try:
        description = await handle.describe()
    finally:
        await handle.delete()
    action = description.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.workflow == "ReconcileWorkflow"
    assert [i.every for i in description.schedule.spec.intervals] == [timedelta(hours=1)]
