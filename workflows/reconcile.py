"""ReconcileWorkflow: the ledger's intent against the observed cluster and gateway.

Started by `ReplicaLossWorkflow` when an incident closes (a child it abandons, so the
reconciliation outlives the incident) and by the schedule `reconcile_schedule` describes
(created by `worker/main.py` / `fleetmend up`). It reads the incident's operations from
the ledger, asks the activities what the cluster and gateway show for each, and stores the
findings: duplicates (an effect stamped on more than one object), orphans (proposed and
never applied, or observed without the ledger saying it was applied) and drift (an
emergency measure still in place with nothing that compensated it).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig

from workflows.types import (
    Finding,
    FindingsInput,
    LedgerOperation,
    LedgerOperations,
    LedgerQuery,
    ObservedEffect,
    ObservedEffects,
    ObserveInput,
    ReconcileInput,
    ReconcileReport,
)

RECONCILE_WORKFLOW_NAME = "ReconcileWorkflow"
RECONCILE_SCHEDULE_ID = "fleetmend-reconcile"

# Activity names the ledger and cluster engineers register (see the report of issue 6).
READ_LEDGER_OPERATIONS = "read_ledger_operations"
OBSERVE_EFFECTS = "observe_effects"
STORE_FINDINGS = "store_findings"

# Reads may be retried freely; storing findings is keyed by the reconciliation's own id.
_READ = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=30)),
)
# Observing makes one Kubernetes read per object and heartbeats before each: a dead
# worker is noticed in 15 s rather than at the 60 s timeout.
_OBSERVE = ActivityConfig(**_READ, heartbeat_timeout=timedelta(seconds=15))

APPLIED_STATES = frozenset({"applied", "confirmed"})


def reconcile_schedule(task_queue: str, every: timedelta = timedelta(hours=1)) -> Schedule:
    """The periodic sweep over recent incidents; `worker` creates it with this id.

    Overlaps are skipped: a sweep still running when the next is due is the next sweep.
    """
    return Schedule(
        action=ScheduleActionStartWorkflow(
            RECONCILE_WORKFLOW_NAME,
            ReconcileInput(),
            id="reconcile/scheduled",
            task_queue=task_queue,
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


def reconcile_workflow_id(incident_id: str | None) -> str:
    """One reconciliation per closed incident; scheduled sweeps get the schedule's ids."""
    return f"reconcile/{incident_id}" if incident_id else "reconcile/all"


def find_discrepancies(
    operations: list[LedgerOperation], observed: list[ObservedEffect]
) -> list[Finding]:
    """Duplicates, orphans and drift, from the ledger's intent and what is observed."""
    seen = {o.op_id: o for o in observed}
    compensated_by = {
        op.compensates for op in operations if op.compensates and op.state in APPLIED_STATES
    }
    findings: list[Finding] = []
    for op in operations:
        if op.dry_run:
            continue
        obs = seen.get(op.op_id)
        if obs is not None and obs.occurrences > 1:
            findings.append(
                Finding(
                    kind="duplicate",
                    op_id=op.op_id,
                    target=op.target,
                    detail=f"stamped on {obs.occurrences} objects: {obs.detail}".rstrip(": "),
                )
            )
        if op.state == "proposed":
            findings.append(
                Finding(
                    kind="orphan",
                    op_id=op.op_id,
                    target=op.target,
                    detail="proposed, never applied"
                    + (" but the effect is present" if obs is not None and obs.present else ""),
                )
            )
        elif (
            op.emergency
            and op.state in APPLIED_STATES
            and op.op_id not in compensated_by
            and (obs is None or obs.present)
        ):
            findings.append(
                Finding(
                    kind="drift",
                    op_id=op.op_id,
                    target=op.target,
                    detail="emergency measure still in place; nothing rolled it back",
                )
            )
    return findings


@workflow.defn(name=RECONCILE_WORKFLOW_NAME)
class ReconcileWorkflow:
    @workflow.run
    async def run(self, input: ReconcileInput) -> ReconcileReport:
        ledger = await workflow.execute_activity(
            READ_LEDGER_OPERATIONS,
            LedgerQuery(incident_id=input.incident_id, since=input.since),
            result_type=LedgerOperations,
            **_READ,
        )
        observed = await workflow.execute_activity(
            OBSERVE_EFFECTS,
            ObserveInput(operations=ledger.operations),
            result_type=ObservedEffects,
            **_OBSERVE,
        )
        findings = find_discrepancies(ledger.operations, observed.effects)
        await workflow.execute_activity(
            STORE_FINDINGS,
            FindingsInput(incident_id=input.incident_id, findings=findings),
            **_READ,
        )
        return ReconcileReport(
            incident_id=input.incident_id, operations=len(ledger.operations), findings=findings
        )
