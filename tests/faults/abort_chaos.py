"""A process-fault drill whose incident an operator aborts, so its saga unwinds.

`AbortingChaosDrill` is `tests/faults/chaos.py`'s `ChaosDrill` (each planned write held in
fleetsim and the fault struck while its activity is blocked in it) plus an operator who
sends the incident the `abort` signal, as `fleetmend abort` would, while a chosen
read-only activity runs. The incident then cancels that read and runs its compensations
newest first, and a `Fault` whose `op_id_contains` names a compensation's operation id
(`{forward op id}/compensate`) strikes inside that undo.

The moment is exact: the reads `abort_in` names are held at a gate in fleetsim
(`tests/faults/gated_reads.py`) until the drill has asked Temporal which activities are
pending, and the abort goes out while the chosen activity is blocked in its read. Aborting
inside a read keeps the abort from cancelling a forward write halfway: what the saga then
undoes is exactly what the incident applied.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from fleetsim.kube.chaos import RequestInfo
from tests.faults.chaos import ChaosDrill
from tests.faults.gated_reads import GatedReads, Reads
from workflows.types import SIGNAL_ABORT, AbortRequest

OPERATOR = "fleetmend-drill (abort)"


@dataclass(frozen=True)
class AbortIn:
    activity: str  # a read-only activity type: the operator aborts while it runs
    reads: Reads  # a read it makes, held until the drill saw whether it is the one running


class AbortingChaosDrill(ChaosDrill):
    def __init__(self, *args: Any, abort_in: AbortIn, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.abort_in = abort_in
        # Workflow id -> the read the abort was sent during (its object).
        self.aborted: dict[str, str] = {}
        self.gated: GatedReads | None = None

    async def start(self) -> None:
        await super().start()
        self.gated = GatedReads(self.fleet.kube_server.chaos, self._abort_if_running)
        self.gated.gates = [self.abort_in.reads]

    async def _abort_if_running(self, req: RequestInfo) -> None:
        assert self.client is not None and self.gated is not None
        for workflow_id in [w for w in self.incidents if w not in self.aborted]:
            if self.abort_in.activity not in await self._pending(workflow_id):
                continue
            request = AbortRequest(
                requested_by=OPERATOR, reason=f"drill: abort during {self.abort_in.activity}"
            )
            await self.client.get_workflow_handle(workflow_id).signal(SIGNAL_ABORT, request)
            self.aborted[workflow_id] = req.object_ref
        if self.incidents and all(w in self.aborted for w in self.incidents):
            self.gated.gates = []

    async def _pending(self, workflow_id: str) -> set[str]:
        assert self.client is not None
        with contextlib.suppress(Exception):  # not started yet: the next read asks again
            desc = await self.client.get_workflow_handle(workflow_id).describe()
            return {p.activity_type.name for p in desc.raw_description.pending_activities}
        return set()
