"""Workflow-level models: the contract between the intake, the CLI and the incident workflow.

Called from `worker/intake.py` (start / signal), `worker/cli.py` (query, approve) and
`workflows/replica_loss.py` (the incident itself). Plain pydantic models, serialised by
Temporal's pydantic data converter, so the Web UI shows readable JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow

# The reconciliation's models live beside their activities; re-exported for the workflow.
# Passed through: importing `activities` loads the Kubernetes and HTTP clients.
with workflow.unsafe.imports_passed_through():
    from activities.reconcile import (
        Finding as Finding,
        FindingKind as FindingKind,
        FindingsInput as FindingsInput,
        LedgerOperation as LedgerOperation,
        LedgerOperations as LedgerOperations,
        LedgerQuery as LedgerQuery,
        ObservedEffect as ObservedEffect,
        ObservedEffects as ObservedEffects,
        ObserveInput as ObserveInput,
    )

WORKFLOW_NAME = "ReplicaLossWorkflow"
SIGNAL_REPLICA_LOST = "replica_lost"
SIGNAL_ALERT_RESOLVED = "alert_resolved"
SIGNAL_ABORT = "abort"
UPDATE_APPROVE = "approve"
SIGNAL_APPROVE = "approve_signal"
QUERY_STATUS = "status"
SIGNAL_ATTEMPT_FAILED = "activity_attempt_failed"

# Custom search attributes the workflows set; `fleetmend up` registers them on the dev server.
SEARCH_ATTRIBUTES: dict[str, str] = {
    "IncidentId": "Keyword",
    "IncidentNamespace": "Keyword",
    "IncidentPool": "Keyword",
    "IncidentSeverity": "Keyword",
    "IncidentStep": "Keyword",
}

FaultKind = Literal[
    "node-not-ready",
    "pod-not-ready",
    "pod-oom-killed",
    "pod-evicted",
    "pod-crashloop",
    "rank-lost",
    "gpu-xid",
    "gpu-ecc",
    "endpoint-dropped",
    "no-traffic",
    "unknown",
]


def incident_workflow_id(namespace: str, pool: str) -> str:
    """One incident per pool: every replica lost while it is open folds into it."""
    return f"replica-loss/{namespace}/{pool}"


class LostReplica(BaseModel):
    """One firing alert, mapped to the replica (or node) it says is gone."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    pool: str
    pod: str | None = None
    node: str | None = None
    fault: FaultKind = "unknown"
    alertname: str = ""
    fingerprint: str = ""
    starts_at: datetime | None = None
    received_at: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    dry_run: bool = False


class AttemptFailed(BaseModel):
    """An activity attempt failed and Temporal will retry it: sent by the worker
    (`worker/attempts.py`) so the running step's timeline entry shows the retries."""

    activity: str
    attempt: int
    failure: str
    retry_in_s: float | None = None  # the server's Retry-After, when it sent one
    final: bool = False  # the retry policy has no attempt left
    # Temporal's id of the activity, the same in all its attempts: two reports of one
    # attempt (by the attempt itself and by its retry) are one failure.
    activity_id: str | None = None


class AlertResolved(BaseModel):
    """A resolved notification: recorded in the timeline, never starts anything."""

    namespace: str
    pool: str
    pod: str | None = None
    node: str | None = None
    alertname: str = ""
    fingerprint: str = ""
    ends_at: datetime | None = None


class IncidentInput(BaseModel):
    """Start argument of ReplicaLossWorkflow (the first loss arrives as a signal)."""

    namespace: str
    pool: str
    dry_run: bool = False
    # Limits arrive from worker settings at start so the workflow stays deterministic.
    blast_radius_fraction: float = 0.25
    auto_shed_tier_limit: int = 2
    gate_timeout_s: float = 900.0
    # Cool-down / half-open of a recovered or replacement replica (seed 002, section 8.3).
    cooldown_s: float = 30.0
    cooldown_max_s: float = 300.0
    probe_share: float = 0.1
    # A cold replica is held at the floor until it is measured, then at what it serves
    # (at most probe_share): patch `hold-share-from-measured-rate`.
    probe_share_floor: float = Field(0.01, gt=0, le=1)
    probe_share_headroom: float = Field(0.8, gt=0, le=1)
    # The floor rises so the probe window still sees this many requests.
    min_probe_requests: int = Field(5, ge=0)
    # How long the ramp waits for a held replacement to load before ramping the Ready
    # ones (before `hold-share-from-measured-rate`: the gate timeout, so a drill with short
    # gates never ramped a replacement that loads for longer).
    replacement_wait_s: float = Field(900.0, gt=0)
    probe_window_s: float = 60.0
    max_probes: int = 4
    ttft_slo_s: float = 2.0
    # The ramp restores traffic over minutes (runbook, ramp_back.py): steps x interval.
    ramp_steps: int = 5
    ramp_step_interval_s: float = 60.0
    # False: no hold, no ramp: a replacement gets an equal share the moment it is ready
    # (the runbook's baseline, for drills that measure what the ramp saves).
    ramp: bool = True
    # Verification retries while a replacement may still be loading weights.
    verify_attempts: int = 3
    verify_interval_s: float = 120.0
    # Waiting requests per survivor that count as a drained queue: the fleet's own baseline
    # (seed 002: thresholds come from two weeks of your data, not from a document).
    waiting_baseline: float = 4.0
    verify_window_s: float = 10.0
    # Carried by continue-as-new; None on the first run.
    state: IncidentState | None = None
    # Tests force continue-as-new with a small history; production trusts Temporal's hint.
    max_history_events: int | None = None


class ApprovalInput(BaseModel):
    """What an operator sends to `approve` (update) or `approve_signal` (signal)."""

    gate: str
    approver: str
    approve: bool = True
    reason: str = ""


class AbortRequest(BaseModel):
    """What an operator sends to `abort`: the incident compensates and stops."""

    requested_by: str = ""
    reason: str = ""


# ----------------------------------------------------------------------------- incident state

Step = Literal[
    "assess",
    "deroute",
    "protect",
    "inflight",
    "promote-warm",
    "provision",
    "reschedule",
    "triage",
    "ramp",
    "verify",
    "roll-back",
    "compensate",
    "closed",
]

GateKind = Literal["force-delete", "shed-tier", "blast-radius", "provision"]
GateOutcome = Literal["approved", "rejected", "timed-out", "dry-run", "aborted"]
IncidentOutcome = Literal[
    "open", "recovered", "recovered-measures-kept", "compensated", "aborted", "cancelled"
]


class TimelineEntry(BaseModel):
    """One thing the incident did or decided, with the numbers it decided on."""

    step: str
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str = "running"
    evidence: dict[str, Any] = Field(default_factory=dict)
    dry_run: bool = False
    # Mutating activities of this step that took more than one attempt (a failed call, a
    # dead worker, a server restart): target -> the attempt that succeeded.
    retried: dict[str, int] = Field(default_factory=dict)


class Effect(BaseModel):
    """One mutating activity call: its operation id and what it did (or would have done)."""

    op_id: str
    step: str
    activity: str
    target: str
    dry_run: bool = False
    applied_now: bool | None = None
    compensation: bool = False
    at: datetime
    attempt: int = 1  # the Temporal attempt that returned; above 1 means it was retried


class Compensation(BaseModel):
    """A saga entry: how to undo one forward operation, registered before it acts."""

    forward_op_id: str
    op_id: str
    step: str
    target: str
    activity: str
    input: dict[str, Any]
    # Discharged: the forward effect was undone by the runbook itself (roll-back step).
    discharged: bool = False
    done: bool = False
    error: str | None = None


class Gate(BaseModel):
    """An approval gate: what it would do if approved and what happens if nobody answers."""

    name: str
    kind: GateKind
    would_do: str
    on_timeout: str
    timeout_s: float
    opened_at: datetime
    deadline: datetime
    evidence: dict[str, Any] = Field(default_factory=dict)
    outcome: GateOutcome | None = None
    approver: str | None = None
    reason: str = ""
    decided_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.outcome is None


class ReplicaShare(BaseModel):
    """Cool-down / half-open bookkeeping of one recovered or replacement replica."""

    pod: str
    cooldown_s: float
    probes: int = 0
    state: Literal["cooling", "half-open", "full", "held-back"] = "cooling"
    # Sized from its measured service rate (patch `hold-share-from-measured-rate`).
    probe_share: float | None = None


class Facts(BaseModel):
    """What the assessment read: the numbers every later step decides on."""

    pool_size: int = 0
    severity: str = "unknown"
    lost_replicas: list[str] = Field(default_factory=list)
    lost_nodes: list[str] = Field(default_factory=list)
    lost_fraction: float = 0.0
    survivors: list[dict[str, Any]] = Field(default_factory=list)
    capacity: dict[str, float] = Field(default_factory=dict)
    warm_ready: list[dict[str, Any]] = Field(default_factory=list)
    model: str | None = None
    revision: str | None = None
    workload_kind: str | None = None
    workload_name: str | None = None
    common_causes: list[str] = Field(default_factory=list)


class IncidentState(BaseModel):
    """Everything the incident knows, in one model, so continue-as-new passes it whole."""

    incident_id: str = ""
    workflow_id: str = ""
    namespace: str = ""
    pool: str = ""
    dry_run: bool = False
    started_at: datetime | None = None
    step: str = "assess"
    completed_steps: list[str] = Field(default_factory=list)
    losses: list[LostReplica] = Field(default_factory=list)
    # Losses already assessed and derouted; later ones are taken in at the next step boundary.
    assessed_losses: int = 0
    seen_alerts: list[str] = Field(default_factory=list)
    resolved: list[AlertResolved] = Field(default_factory=list)
    facts: Facts = Field(default_factory=Facts)
    # The assessment's severity not yet told to the channel (it waits for the deroute).
    severity_unannounced: bool = False
    derouted: list[str] = Field(default_factory=list)
    held_routed: list[str] = Field(default_factory=list)
    shed_level: int = 0
    shed_previous: dict[str, Any] | None = None
    # The tier each applied shedding measure replaced (op id -> TierSpec), to undo newest first.
    shed_replaced: dict[str, dict[str, Any]] = Field(default_factory=dict)
    new_replicas: list[dict[str, Any]] = Field(default_factory=list)
    # The workload controller's own replacements, held at the probe share until ramped.
    replacements: list[dict[str, Any]] = Field(default_factory=list)
    # Lost nodes that serve again (a replacement landed there): not failed, not cordoned.
    nodes_serving_again: list[str] = Field(default_factory=list)
    shares: dict[str, ReplicaShare] = Field(default_factory=dict)
    triaged_nodes: list[str] = Field(default_factory=list)
    verified: bool = False
    # The ramp's verdict: routing is not admission, shedding stays while a cache is cold.
    keep_shedding_reason: str | None = None
    # Replacements that verification found on a pool they do not belong in.
    misplaced: list[str] = Field(default_factory=list)
    timeline: list[TimelineEntry] = Field(default_factory=list)
    effects: list[Effect] = Field(default_factory=list)
    saga: list[Compensation] = Field(default_factory=list)
    gates: dict[str, Gate] = Field(default_factory=dict)
    abort: AbortRequest | None = None
    outcome: IncidentOutcome = "open"
    runs: int = 1


class PendingGate(BaseModel):
    """A gate as the status query shows it: what approving it would do, and the deadline."""

    gate: str
    kind: GateKind
    would_do: str
    on_timeout: str
    deadline: datetime
    evidence: dict[str, Any] = Field(default_factory=dict)


class IncidentStatus(BaseModel):
    """What the `status` query returns."""

    incident_id: str
    step: str
    outcome: IncidentOutcome
    dry_run: bool
    severity: str
    losses: list[str]
    pending_gates: list[PendingGate]
    timeline: list[TimelineEntry]
    effects: list[Effect]
    compensations: list[Compensation]
    runs: int


class IncidentResult(BaseModel):
    """What the incident workflow returns when it closes."""

    incident_id: str
    outcome: IncidentOutcome
    steps: list[str]
    effects: int
    compensated: int
    runs: int


class GateDecision(BaseModel):
    """What `approve` answers."""

    gate: str
    outcome: GateOutcome
    approver: str


# ----------------------------------------------------------------------------- reconciliation


class ReconcileInput(BaseModel):
    """Start argument of ReconcileWorkflow; no incident id means every incident since `since`."""

    incident_id: str | None = None
    namespace: str | None = None
    pool: str | None = None
    since: datetime | None = None


class ReconcileReport(BaseModel):
    incident_id: str | None
    operations: int
    findings: list[Finding]


# IncidentInput names IncidentState, defined below it to keep the contract types first.
IncidentInput.model_rebuild()
