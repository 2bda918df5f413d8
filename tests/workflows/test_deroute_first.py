"""Nothing but the reads it needs stands between the alert and the deroute (`deroute-first`)."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.histories.record import deroute_first
from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, wait_for_gate
from workflows.types import SIGNAL_ABORT, SIGNAL_REPLICA_LOST, AbortRequest


async def _activities_in_history(handle: WorkflowHandle) -> tuple[list[str], list[str]]:
    """(activities scheduled on the task queue, activities run locally), in history order."""
    queued: list[str] = []
    local: list[str] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            queued.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == "core_local_activity":
                data = json.loads(marker.details["data"].payloads[0].data)
                local.append(data["activity_type"])
    return queued, local


async def test_the_reads_before_the_deroute_run_locally_and_the_channel_hears_after_it(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    async with running_worker(ts_env.client, task_queue, fleet):
        handle = await deroute_first(ts_env.client, task_queue, fleet)
        result = await handle.result()
        queued, local = await _activities_in_history(handle)
    assert result.outcome == "recovered"
    assert local[:2] == ["assess_loss", "read_routing_state"]
    assert "assess_loss" not in queued and "read_routing_state" not in queued
    # The first activity on the task queue is the deroute; the severity message follows it.
    assert queued[:2] == ["deroute_replica", "notify_incident_channel"]
    called = [name for name, _ in fleet.calls]
    assert called.index("deroute_replica") < called.index("notify_incident_channel")


async def test_an_operator_asked_to_approve_a_deroute_beyond_the_limit_has_heard_the_severity(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=4, warm=0)
    first, second = f"{fleet.pool}-0", f"{fleet.pool}-1"
    fleet.kill(first)
    fleet.kill(second)
    client = ts_env.client
    # Both losses are in before the assessment: one of four is within the 25% limit,
    # the second is beyond it and waits for an operator.
    handle = await report_loss(client, task_queue, fleet, loss_of(fleet, first))
    await handle.signal(SIGNAL_REPLICA_LOST, loss_of(fleet, second))
    async with running_worker(client, task_queue, fleet):
        await wait_for_gate(handle, f"blast-radius/{second}")
        called = [name for name, _ in fleet.calls]
        await handle.signal(SIGNAL_ABORT, AbortRequest(requested_by="test", reason="done"))
        await handle.result()
    assert called.count("deroute_replica") == 1
    assert called.index("deroute_replica") < called.index("notify_incident_channel")
    assert fleet.pods[first].routed is False
    assert fleet.pods[second].routed is True
