"""A drill with process faults injected mid-incident, at exact points of the runbook.

`ChaosDrill` is `worker.drill.Drill` (fleetsim in this process; PostgreSQL, the Temporal
dev server, the worker and the intake as child processes) plus a plan run beside it. Each
`Fault` of the plan waits for the first Kubernetes write whose op-id stamp contains its
`op_id_contains`, and holds that write in fleetsim (`fleetsim/kube/mutations.py`), so the
activity that sent it is running and blocked in its write when the fault strikes:

- `kill-worker`: SIGKILL the worker, release the write (it takes effect with nobody left
  to record it: the "applied, not recorded" window), start a new worker;
- `restart-postgres`: stop PostgreSQL with the activity's ledger claim open, start it on
  the same data dir, release the write;
- `restart-temporal`: release the write, stop the Temporal dev server, post an alert to
  the intake while it is down (Alertmanager's resolved notification for the lost pod,
  resent while refused, as Alertmanager does), start the server on the same SQLite file.

Effects are counted by fleetsim, never by the ledger under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from prometheus_client.parser import text_string_to_metric_families

from fleetsim.kube.mutations import Hold
from worker import stack_faults
from worker.drill import Drill, DrillResult, webhook_payload
from workflows.types import QUERY_STATUS, IncidentStatus

Action = Literal["kill-worker", "restart-postgres", "restart-temporal"]


@dataclass(frozen=True)
class Fault:
    activity: str  # the activity the held write belongs to (for messages and assertions)
    op_id_contains: str
    action: Action = "kill-worker"


@dataclass
class Struck:
    fault: Fault
    op_id: str
    object: str
    wall_s: float  # when it struck, from the drill's start
    detail: dict[str, Any] = field(default_factory=dict)


class ChaosDrill(Drill):
    def __init__(self, *args: Any, plan: list[Fault], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan
        self.struck: list[Struck] = []
        self.missed: list[Fault] = []
        self.final_status: dict[str, IncidentStatus] = {}
        self.chaos_error: str | None = None
        self._alert_sent_at: float | None = None
        self._chaos: asyncio.Task[None] | None = None
        self._holds: list[tuple[Fault, Hold]] = []

    async def start(self) -> None:
        await super().start()
        mutations = self.fleet.kube_server.mutations
        self._holds = [(f, mutations.hold(f.op_id_contains)) for f in self.plan]
        self._chaos = asyncio.create_task(self._strike_in_turn())

    async def close(self) -> None:
        if self._chaos is not None:
            self._chaos.cancel()
            self._release_all()
        await super().close()

    def _release_all(self) -> None:
        for _, hold in self._holds:
            self.fleet.kube_server.mutations.release(hold.id)

    async def _finish(self) -> DrillResult:
        assert self.client is not None
        for workflow_id in self.incidents:
            handle = self.client.get_workflow_handle(workflow_id)
            self.final_status[workflow_id] = await handle.query(
                QUERY_STATUS, result_type=IncidentStatus
            )
        return await super()._finish()

    async def _strike_in_turn(self) -> None:
        try:
            await self._strike_each()
        except Exception as exc:
            # A fault that could not be injected must not leave writes held: the drill
            # goes on without the rest of the plan, and the tests report why.
            self.chaos_error = f"{type(exc).__name__}: {exc}"
            self._release_all()
            await self._give_up_on_incidents()

    async def _give_up_on_incidents(self) -> None:
        # The fault left the stack broken: end the incidents so the drill, and the tests
        # reading chaos_error, finish now rather than at the drill's timeout.
        assert self.client is not None
        for workflow_id in self.incidents:
            with contextlib.suppress(Exception):
                handle = self.client.get_workflow_handle(workflow_id)
                await handle.terminate(reason=f"fault injection failed: {self.chaos_error}")

    async def _strike_each(self) -> None:
        mutations = self.fleet.kube_server.mutations
        for fault, hold in self._holds:
            while hold.holding is None:
                if self._all_closed() and self.incidents:
                    self.missed.append(fault)
                    break
                await asyncio.sleep(0.05)
            if hold.holding is None:
                mutations.release(hold.id)
                continue
            caught = hold.holding
            detail = await self._strike(fault, hold)
            self.struck.append(
                Struck(
                    fault=fault,
                    op_id=caught.op_id or "",
                    object=caught.object,
                    wall_s=round(self.elapsed_wall(), 2),
                    detail=detail,
                )
            )

    async def _strike(self, fault: Fault, hold: Hold) -> dict[str, Any]:
        assert self.stack is not None
        mutations = self.fleet.kube_server.mutations
        if fault.action == "kill-worker":
            pid = stack_faults.kill(self.stack, "worker")
            mutations.release(hold.id)
            return {"killed_pid": pid, "new_pid": stack_faults.respawn(self.stack, "worker")}
        if fault.action == "restart-postgres":
            down = await asyncio.to_thread(stack_faults.restart_postgres, self.stack, down_s=1.0)
            mutations.release(hold.id)
            return {"postgres_down_s": round(down, 2)}
        mutations.release(hold.id)
        await asyncio.to_thread(stack_faults.stop_temporal, self.stack)
        down = time.monotonic()
        alert = asyncio.create_task(self._post_resolved_alert())
        # The intake holds the request, or answers 503 and the sender resends, meanwhile.
        await asyncio.sleep(1.0)
        sent_while_down = self._alert_sent_at is not None
        await asyncio.to_thread(stack_faults.start_temporal, self.stack)
        up = time.monotonic()
        refused, error = await alert
        return {
            "temporal_down_s": round(up - down, 2),
            "alert_sent_while_down": sent_while_down,
            "alert": error,
            "refused": refused,
        }

    async def _post_resolved_alert(self) -> tuple[int, str | None]:
        """Alertmanager's resolved notification for the first lost pod, resent while refused.

        Alertmanager keeps resending a notification the receiver refused with a 5xx until
        the next group interval; `Drill._post` is one round of that, repeated here. Returns
        how many requests the intake refused for want of Temporal, and the last error if
        the notification never got through.
        """
        firing = next(
            a for fault in self.fleet.injected for a in fault.alerts if a.labels.get("pod")
        )
        payload = webhook_payload([firing.to_alertmanager()])
        payload["status"] = payload["alerts"][0]["status"] = "resolved"
        payload["alerts"][0]["endsAt"] = payload["alerts"][0]["startsAt"]
        async with httpx.AsyncClient(timeout=30.0) as http:
            before = await self._refused_for_temporal(http)
            self._alert_sent_at = time.monotonic()
            error: str | None = None
            for _ in range(4):
                error = await self._post(http, payload)
                if error is None or error.startswith("HTTP 4"):
                    break
            return await self._refused_for_temporal(http) - before, error

    async def _refused_for_temporal(self, http: httpx.AsyncClient) -> int:
        assert self.stack is not None
        resp = await http.get(
            f"{self.stack.intake_url}/metrics", headers={"Authorization": f"Bearer {self.token}"}
        )
        resp.raise_for_status()
        for family in text_string_to_metric_families(resp.text):
            if family.name == "fleetmend_intake_temporal_unavailable":
                return int(sum(x.value for x in family.samples if x.name.endswith("_total")))
        return 0
