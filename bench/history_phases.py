"""Where an incident's time to deroute goes, read from its Temporal history.

Used by `deroute_bench`. Pure functions over (event type, time, attributes) rows, so the
split is unit-tested without a server; `fetch_rows` is the only I/O.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client


@dataclass(frozen=True)
class Row:
    event_id: int
    kind: str  # "started", "scheduled", "activity-started", "completed", "local"
    at: float  # wall-clock seconds (server time); a local activity's completion
    activity: str = ""
    scheduled_id: int = 0
    began: float = 0.0  # a local activity's first schedule (worker clock)


def split_phases(rows: list[Row], posted_at: float, out_at: float) -> dict[str, float]:
    """Seconds from the alert POST to the endpoint out, by phase.

    `intake -> workflow started`; per activity type, `queued` (scheduled -> started: the
    task queue's dispatch) and `running` (started -> completed); per local activity type
    (`local activity X`), its schedule -> completion as its marker records them;
    `workflow tasks and gaps` is the rest, the time between activities. Activities
    scheduled after `out_at` are not part of it; one still running at `out_at` (the
    deroute itself confirming) counts up to `out_at`.
    """
    phases: dict[str, float] = {}
    started = next((r.at for r in rows if r.kind == "started"), None)
    if started is None:
        return {"intake -> workflow started": out_at - posted_at}
    phases["intake -> workflow started"] = max(0.0, started - posted_at)
    scheduled = {r.event_id: r for r in rows if r.kind == "scheduled" and r.at <= out_at}
    starts = {r.scheduled_id: r.at for r in rows if r.kind == "activity-started"}
    ends = {r.scheduled_id: r.at for r in rows if r.kind == "completed"}
    for event_id, row in scheduled.items():
        end = min(ends.get(event_id, out_at), out_at)
        # Without a started event (still running at the end of the history) it all ran.
        start = min(max(starts.get(event_id, row.at), row.at), end)
        for part, seconds in (("queued", start - row.at), ("running", end - start)):
            name = f"activity {row.activity}: {part}"
            phases[name] = phases.get(name, 0.0) + max(0.0, seconds)
    for row in rows:
        if row.kind == "local" and row.began <= out_at:
            name = f"local activity {row.activity}"
            phases[name] = phases.get(name, 0.0) + max(0.0, min(row.at, out_at) - row.began)
    accounted = sum(phases.values())
    phases["workflow tasks and gaps"] = max(0.0, (out_at - posted_at) - accounted)
    return phases


def median_phases(splits: list[dict[str, float]]) -> dict[str, float]:
    """Median seconds per phase over incidents (a phase an incident lacks counts as 0)."""
    names = list(dict.fromkeys(name for split in splits for name in split))
    return {name: statistics.median(s.get(name, 0.0) for s in splits) for name in names}


_ACTIVITY_ENDS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}


async def fetch_rows(client: Client, workflow_id: str) -> list[Row]:
    rows: list[Row] = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        at = event.event_time.ToMicroseconds() / 1e6
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            rows.append(Row(event.event_id, "started", at))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            rows.append(Row(event.event_id, "scheduled", at, activity=name))
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            local = local_activity_row(event.event_id, event.marker_recorded_event_attributes)
            if local is not None:
                rows.append(local)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes.scheduled_event_id
            rows.append(Row(event.event_id, "activity-started", at, scheduled_id=started))
        elif kind in _ACTIVITY_ENDS:
            attrs: Any = getattr(event, _ACTIVITY_ENDS[kind])
            rows.append(Row(event.event_id, "completed", at, scheduled_id=attrs.scheduled_event_id))
    return rows


LOCAL_ACTIVITY_MARKER = "core_local_activity"


def local_activity_row(event_id: int, marker: Any) -> Row | None:
    """A local activity's marker as a row; None for any other marker (patches...).

    The SDK writes the marker's `data` as JSON: when the activity was first scheduled and
    when it completed (the worker's clock), so its run shows without a task queue.
    """
    if marker.marker_name != LOCAL_ACTIVITY_MARKER or "data" not in marker.details:
        return None
    data = json.loads(marker.details["data"].payloads[0].data)
    return Row(
        event_id,
        "local",
        _seconds(data["complete_time"]),
        activity=str(data["activity_type"]),
        began=_seconds(data["original_schedule_time"]),
    )


def _seconds(stamp: dict[str, Any]) -> float:
    return float(stamp.get("seconds", 0)) + float(stamp.get("nanos", 0)) / 1e9
