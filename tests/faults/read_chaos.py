"""A drill whose worker is SIGKILLed while each read-only activity of the incident runs.

`ReadChaosDrill` is `worker.drill.Drill` plus a watcher beside it. A read changes nothing
in fleetsim, so there is no write to hold: the watcher polls the incident's pending
activities (`describe()`, as the Web UI's "Pending Activities" shows them) and, the first
time an activity of a planned type is running on its first attempt, SIGKILLs the worker
and starts a new one. Temporal then notices the dead worker at the activity's heartbeat or
start-to-close timeout and runs the next attempt on the new worker.

An activity that makes a few quick Kubernetes reads would finish between two polls; its
`ReadFault` names an `ApiFault` window that hangs its first read in fleetsim's API server
(`fleetsim/kube/chaos.py`), so it is still running when the watcher looks. The window is
closed before the new worker starts, so the retry reads normally.

At the end, while the fleet still runs, `probe_rbac` asks the API server, with the worker's
token, for something `deploy/rbac.yaml` does not grant (the list of namespaces), to show
the RBAC is enforced and not merely unexercised.

A local activity (`assess_loss` and `read_routing_state` from `deroute-first` on) is never
pending on the server: the watcher kills when its hung read reaches fleetsim. The new
worker replays the workflow task the dead one held, after that task's timeout, and runs
the local activity again.

A read another step also makes (`find_warm_workload`'s pod, `verify_capacity`'s
Deployment, the pool's pod list of `estimate_lead_time`, `find_replacements` and
`diagnose_pending`) is caught by its `gate` (`tests/faults/gated_reads.py`): each such
read is held until the watcher has read the pending activities, and the worker is killed
only if the planned activity is running its first attempt. `notify_incident_channel` is
caught by its `post`: the drill's channel holds that message's first POST
(`tests/faults/held_channel.py`) and the worker is killed while it waits.

After the run, `activity_runs` holds each activity's attempt from the workflow's
history (the ActivityTaskStarted event records the attempt that ran to the end), and
`local_runs` each local activity's completion time from its marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo

from activities.k8s import build_api_client
from bench.history_phases import local_activity_row
from fleetsim.kube.chaos import ApiFault, RequestInfo, Window
from tests.faults.gated_reads import GatedReads, Reads
from tests.faults.held_channel import HeldChannel, PostMode
from worker import stack_faults
from worker.drill import Drill, DrillResult
from workflows.types import QUERY_STATUS, IncidentStatus

POLL_S = 0.02


@dataclass(frozen=True)
class ReadFault:
    activity: str  # the activity type to kill the worker in, the first time it runs
    # For an activity too quick to catch between polls: hang its first read in this window.
    hang: ApiFault | None = None
    # For a quick read another step also makes: hold each such read until the watcher saw
    # whether this activity is the one running.
    gate: Reads | None = None
    # For notify_incident_channel: how the channel holds the next new message's POST.
    post: PostMode | None = None
    label: str = ""  # tells two faults on one activity type apart

    @property
    def key(self) -> str:
        return self.label or self.activity


Caught = list[tuple[ReadFault, PendingActivityInfo | None]]


@dataclass
class Killed:
    fault: ReadFault
    activity_id: str
    wall_s: float  # when the worker was killed, from the drill's start
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActivityRun:
    activity_id: str
    activity: str
    attempt: int
    completed: bool


@dataclass(frozen=True)
class LocalRun:
    activity: str
    completed_at: float  # epoch seconds, the worker's clock


class ReadChaosDrill(Drill):
    def __init__(self, *args: Any, plan: list[ReadFault], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan
        self.killed: list[Killed] = []
        self.missed: list[ReadFault] = []
        self.final_status: dict[str, IncidentStatus] = {}
        self.activity_runs: dict[str, list[ActivityRun]] = {}
        self.local_runs: dict[str, list[LocalRun]] = {}
        self.workflow_tasks_timed_out: dict[str, int] = {}
        self.chaos_error: str | None = None
        self.forbidden_during_incident: list[str] = []
        self.probe: tuple[int, str] | None = None  # the refused request's status and message
        self._watcher: asyncio.Task[None] | None = None
        self._windows: dict[str, Window] = {}
        self._waiting = {f.key: f for f in plan}
        self._killing = asyncio.Lock()
        self._posts = [f for f in plan if f.post is not None]
        self.gated: GatedReads | None = None
        self.held_channel = HeldChannel([f.post for f in self._posts if f.post is not None])
        self.channel = self.held_channel

    async def start(self) -> None:
        await super().start()
        chaos = self.fleet.kube_server.chaos
        self._windows = {f.key: chaos.open(f.hang) for f in self.plan if f.hang is not None}
        self.gated = GatedReads(chaos, self._inspect_read)
        self.gated.gates = [f.gate for f in self.plan if f.gate is not None]
        self._watcher = asyncio.create_task(self._watch())

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        self._close_windows()
        await super().close()

    def _close_windows(self) -> None:
        now = time.monotonic()
        for window in self._windows.values():
            window.closes_at = min(window.closes_at, now)
        if self.gated is not None:
            self.gated.gates = []
        self.held_channel.release()

    async def _finish(self) -> DrillResult:
        assert self.client is not None
        for workflow_id in self.incidents:
            handle = self.client.get_workflow_handle(workflow_id)
            self.final_status[workflow_id] = await handle.query(
                QUERY_STATUS, result_type=IncidentStatus
            )
            await self._read_history(workflow_id)
        self.forbidden_during_incident = self.forbidden()
        self.probe = await asyncio.to_thread(self._probe_rbac)
        return await super()._finish()

    def _probe_rbac(self) -> tuple[int, str]:
        api = build_api_client(host=self.fleet.kube_url, token=self.fleet.kube_token)
        try:
            client.CoreV1Api(api).list_namespace()
        except ApiException as exc:
            return exc.status, json.loads(exc.body or "{}").get("message", "")
        finally:
            api.close()
        return 200, "listed"

    async def _read_history(self, workflow_id: str) -> None:
        assert self.client is not None
        scheduled: dict[int, tuple[str, str]] = {}
        started: dict[int, int] = {}
        completed: set[int] = set()
        local: list[LocalRun] = []
        timed_out = 0
        handle = self.client.get_workflow_handle(workflow_id)
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = (attrs.activity_id, attrs.activity_type.name)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                s = event.activity_task_started_event_attributes
                started[s.scheduled_event_id] = s.attempt
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                completed.add(event.activity_task_completed_event_attributes.scheduled_event_id)
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                timed_out += 1
            elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                row = local_activity_row(event.event_id, event.marker_recorded_event_attributes)
                if row is not None and row.activity is not None:
                    local.append(LocalRun(row.activity, row.at))
        self.activity_runs[workflow_id] = [
            ActivityRun(activity_id, name, started.get(event_id, 0), event_id in completed)
            for event_id, (activity_id, name) in scheduled.items()
        ]
        self.local_runs[workflow_id] = local
        self.workflow_tasks_timed_out[workflow_id] = timed_out

    async def _watch(self) -> None:
        try:
            await self._kill_in_each()
        except Exception as exc:
            # A fault that could not be injected must not leave reads hanging: the drill
            # goes on without the rest of the plan, and the tests report why.
            self.chaos_error = f"{type(exc).__name__}: {exc}"
            self._close_windows()

    async def _kill_in_each(self) -> None:
        waiting = self._waiting
        while waiting:
            if self.incidents and self._all_closed():
                self.missed = list(waiting.values())
                return
            for workflow_id in list(self.incidents):
                async with self._killing:
                    caught = await self._caught(workflow_id)
                    if caught:
                        # One kill strikes every planned read running on that worker.
                        self.killed += await self._kill(caught)
            await asyncio.sleep(POLL_S)

    async def _caught(self, workflow_id: str) -> Caught:
        waiting = self._waiting
        pending = {p.activity_type.name: p for p in await self._running_first_attempts(workflow_id)}
        # A gated read is caught by its gate, a held post by its arrival; the rest running.
        caught: Caught = [
            (waiting.pop(f.key), pending[f.activity])
            for f in list(waiting.values())
            if f.activity in pending and f.gate is None and f.post is None
        ]
        caught += [
            (waiting.pop(f.key), pending.get(f.activity))
            for i, f in enumerate(self._posts)
            if f.key in waiting and self.held_channel.arrived(i) is not None
        ]
        # A local activity is never pending: its hung read is the sign it runs.
        caught += [
            (waiting.pop(key), None)
            for key, window in list(self._windows.items())
            if key in waiting and sum(window.hits.values()) > 0
        ]
        return caught

    async def _inspect_read(self, req: RequestInfo) -> None:
        """A gated read is held: kill the worker if it is a planned activity's first run."""
        async with self._killing:
            gated = [f for f in self._waiting.values() if f.gate is not None and f.gate.match(req)]
            for workflow_id in list(self.incidents) if gated else []:
                running = {
                    p.activity_type.name: p for p in await self._running_first_attempts(workflow_id)
                }
                caught: Caught = [
                    (self._waiting.pop(f.key), running[f.activity])
                    for f in gated
                    if f.activity in running
                ]
                if caught:
                    killed = await self._kill(caught)
                    for k in killed:
                        k.detail["held_read"] = req.object_ref
                    self.killed += killed
                    break
            if self.gated is not None:
                # Once every gated activity was killed, reads pass without a look.
                self.gated.gates = [f.gate for f in self._waiting.values() if f.gate is not None]

    async def _running_first_attempts(self, workflow_id: str) -> list[PendingActivityInfo]:
        assert self.client is not None
        with contextlib.suppress(Exception):  # not started yet: the next poll asks again
            desc = await self.client.get_workflow_handle(workflow_id).describe()
            return [
                p
                for p in desc.raw_description.pending_activities
                if p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED and p.attempt == 1
            ]
        return []

    async def _kill(self, caught: Caught) -> list[Killed]:
        assert self.stack is not None
        pid = stack_faults.kill(self.stack, "worker")
        killed_at = time.time()
        for fault, _ in caught:
            window = self._windows.pop(fault.key, None)
            if window is not None:
                window.closes_at = min(window.closes_at, time.monotonic())
            if fault in self._posts:
                self.held_channel.release(self._posts.index(fault))
        new_pid = await asyncio.to_thread(stack_faults.respawn, self.stack, "worker")
        return [
            Killed(
                fault=fault,
                activity_id=pending.activity_id if pending is not None else "",
                wall_s=round(self.elapsed_wall(), 2),
                detail={
                    "killed_pid": pid,
                    "new_pid": new_pid,
                    "killed_at": killed_at,
                    # How long it had run when the worker died: the margin the polling had.
                    "running_for_s": (
                        round(killed_at - pending.last_started_time.ToNanoseconds() / 1e9, 3)
                        if pending is not None
                        else None
                    ),
                },
            )
            for fault, pending in caught
        ]
