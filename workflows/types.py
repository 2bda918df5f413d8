"""Workflow-level models: the contract between the intake, the CLI and the incident workflow.

Called from `worker/intake.py` (start / signal), `worker/cli.py` (query, approve) and
`workflows/replica_loss.py` (the incident itself). Plain pydantic models, serialised by
Temporal's pydantic data converter, so the Web UI shows readable JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

WORKFLOW_NAME = "ReplicaLossWorkflow"
SIGNAL_REPLICA_LOST = "replica_lost"
SIGNAL_ALERT_RESOLVED = "alert_resolved"
SIGNAL_ABORT = "abort"
UPDATE_APPROVE = "approve"
SIGNAL_APPROVE = "approve_signal"
QUERY_STATUS = "status"

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


class ApprovalInput(BaseModel):
    """What an operator sends to `approve` (update) or `approve_signal` (signal)."""

    gate: str
    approver: str
    approve: bool = True
    reason: str = ""
