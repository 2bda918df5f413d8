"""A deliberately incompatible change of the incident workflow, for the replay test.

It protects the survivors before derouting: the order the runbook forbids, and a change a
running incident's history cannot replay through.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.replica_loss import ReplicaLossWorkflow
from workflows.types import WORKFLOW_NAME, IncidentInput, IncidentResult


@workflow.defn(name=WORKFLOW_NAME)
class ReorderedReplicaLossWorkflow(ReplicaLossWorkflow):
    @workflow.run
    async def run(self, input: IncidentInput) -> IncidentResult:
        return await super().run(input)

    async def _run_runbook(self) -> None:
        await self._step("assess", self.assess)
        await self._step("protect", self.protect_survivors)
        await self._step("deroute", self.deroute)
