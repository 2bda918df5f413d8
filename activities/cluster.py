"""Kubernetes activities of the runbook: assess, deroute, promote, scale, reschedule, verify.

Called from `workflows/replica_loss.py` through `ClusterActivities` (registered by
`activities.build_activities`). Sync activities on the worker's thread pool, using the
official `kubernetes` client; every mutating one goes through `EffectRunner` with the
operation id the workflow passes in, and stamps that id on the object it changes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import Check, MutatingInput, PodRef, activity_options

Severity = Literal["capacity-event", "major", "outage"]
CommonCause = Literal[
    "rollout", "node-pool-operation", "image-pull", "node-filesystem-full", "fabric-domain"
]

# ---------------------------------------------------------------------------- assess


class LossReport(BaseModel):
    """One lost replica as the workflow knows it (mirrors workflows.types.LostReplica)."""

    pod: str | None = None
    node: str | None = None
    fault: str = "unknown"
    starts_at: datetime | None = None


class AssessInput(BaseModel):
    namespace: str
    pool: str
    losses: list[LossReport]
    # Fraction of the pool whose loss is an outage regardless of domains.
    outage_fraction: float = 0.25


class FailureDomains(BaseModel):
    nodes: list[str] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)
    racks: list[str] = Field(default_factory=list)
    fabrics: list[str] = Field(default_factory=list)


class CommonCauseFinding(BaseModel):
    cause: CommonCause
    evidence: dict[str, object] = Field(default_factory=dict)


class WarmFloor(BaseModel):
    """Loaded, healthy, registered spares for the exact model and revision."""

    model: str | None = None
    revision: str | None = None
    ready: list[PodRef] = Field(default_factory=list)
    # Pods labelled warm that do not count, with the reason (wrong revision, not ready...).
    excluded: dict[str, str] = Field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.ready)


class AssessResult(BaseModel):
    namespace: str
    pool: str
    pool_size: int
    lost_replicas: list[str]
    lost_nodes: list[str]
    lost_fraction: float
    domains: FailureDomains
    largest_domain_loss: int
    severity: Severity
    severity_reason: str
    common_causes: list[CommonCauseFinding] = Field(default_factory=list)
    survivors: list[PodRef] = Field(default_factory=list)
    warm_floor: WarmFloor
    workload_kind: str | None = None
    workload_name: str | None = None
    model: str | None = None
    revision: str | None = None


ASSESS_OPTIONS = activity_options(start_to_close=60, max_attempts=5)

# ---------------------------------------------------------------------------- routing


class EndpointState(BaseModel):
    pod: str | None
    address: str
    ready: bool | None
    serving: bool | None
    terminating: bool | None

    @property
    def routable(self) -> bool:
        # The EndpointSlice contract: a nil `ready` means ready.
        return self.ready is not False


class RoutingStateInput(BaseModel):
    namespace: str
    service: str
    pods: list[str] = Field(default_factory=list)


class RoutingStateResult(BaseModel):
    service: str
    publish_not_ready_addresses: bool
    endpoints: list[EndpointState]
    # Pods among `pods` a router would still send traffic to, with the reason.
    still_routable: dict[str, str] = Field(default_factory=dict)


READ_ROUTING_OPTIONS = activity_options(start_to_close=30, max_attempts=5)


class DerouteInput(MutatingInput):
    namespace: str
    service: str
    pod: str
    # Seconds to wait for the endpoint to leave the ready set before failing the attempt.
    confirm_timeout_s: float = 60.0


class DerouteResult(BaseModel):
    pods: list[str]
    group: str | None = None
    label_removed: str
    already_out: list[str] = Field(default_factory=list)
    applied_now: bool
    confirmed: bool
    routing: RoutingStateResult | None = None
    controller_selector: dict[str, str] = Field(default_factory=dict)


DEROUTE_OPTIONS = activity_options(start_to_close=120, heartbeat=20, max_attempts=10)


class RestoreRoutingInput(MutatingInput):
    """Compensation of deroute_replica: put the router-only label back."""

    namespace: str
    pods: list[str]


class RestoreRoutingResult(BaseModel):
    pods: list[str]
    missing: list[str] = Field(default_factory=list)
    applied_now: bool


RESTORE_ROUTING_OPTIONS = activity_options(start_to_close=60, max_attempts=10)


class ForceDeleteInput(MutatingInput):
    namespace: str
    pod: str
    # The approval gate's record; without it the activity refuses.
    approved_by: str | None = None
    approval_reason: str = ""


class ForceDeleteResult(BaseModel):
    pod: str
    deleted: bool
    applied_now: bool
    approved_by: str


FORCE_DELETE_OPTIONS = activity_options(start_to_close=60, max_attempts=5)

# ---------------------------------------------------------------------------- warm capacity


class PromoteWarmInput(MutatingInput):
    namespace: str
    pool: str
    model: str
    revision: str
    # How many warm replicas to promote; None promotes every one that qualifies.
    count: int | None = None
    mode: Literal["label", "weight"] = "label"
    # Router weight given to promoted replicas in "weight" mode (probe share for warm-up).
    weight: int = 100


class PromoteWarmResult(BaseModel):
    promoted: list[PodRef]
    skipped: dict[str, str] = Field(default_factory=dict)
    mode: str
    applied_now: bool


PROMOTE_WARM_OPTIONS = activity_options(start_to_close=60, max_attempts=10)


class DemoteWarmInput(MutatingInput):
    """Compensation of promote_warm."""

    namespace: str
    pods: list[str]
    mode: Literal["label", "weight"] = "label"


class DemoteWarmResult(BaseModel):
    pods: list[str]
    applied_now: bool


DEMOTE_WARM_OPTIONS = activity_options(start_to_close=60, max_attempts=10)


class ScaleInput(MutatingInput):
    namespace: str
    kind: Literal["Deployment", "LeaderWorkerSet"] = "Deployment"
    name: str
    replicas: int


class ScaleResult(BaseModel):
    kind: str
    name: str
    previous_replicas: int
    replicas: int
    applied_now: bool


SCALE_OPTIONS = activity_options(start_to_close=60, max_attempts=10)


class LeadTimeInput(BaseModel):
    namespace: str
    pool: str
    default_s: float | None = None


class LeadTimeResult(BaseModel):
    seconds: float
    source: Literal["observed", "default"]
    samples: list[float] = Field(default_factory=list)
    quantile: float = 0.9


LEAD_TIME_OPTIONS = activity_options(start_to_close=30, max_attempts=5)


class PendingInput(BaseModel):
    namespace: str
    pool: str


class PendingPod(BaseModel):
    pod: str
    gpus_requested: int
    reasons: list[str]
    messages: list[str]


class PendingResult(BaseModel):
    diagnosis: Literal["none-pending", "fragmentation", "shortage", "other"]
    explanation: str
    pending: list[PendingPod] = Field(default_factory=list)
    free_gpus_total: int
    free_gpus_by_node: dict[str, int] = Field(default_factory=dict)
    largest_free_block: int


PENDING_OPTIONS = activity_options(start_to_close=30, max_attempts=5)

# ---------------------------------------------------------------------------- nodes


class CordonInput(MutatingInput):
    node: str
    reason: str = ""
    mark_unqualified: bool = True


class CordonResult(BaseModel):
    node: str
    unschedulable: bool
    qualified_label: str | None
    applied_now: bool


CORDON_OPTIONS = activity_options(start_to_close=30, max_attempts=10)


class UncordonInput(MutatingInput):
    node: str
    # Leave the node labelled unqualified (it goes back to scheduling, not to serving).
    keep_unqualified: bool = True


class UncordonResult(BaseModel):
    node: str
    unschedulable: bool
    applied_now: bool


UNCORDON_OPTIONS = activity_options(start_to_close=30, max_attempts=10)


class RelocateInput(MutatingInput):
    """A replacement landed on a node pool it does not belong in."""

    namespace: str
    pod: str
    wait_rescheduled_s: float = 120.0


class RelocateResult(BaseModel):
    pod: str
    wrong_node: str
    replacement: str | None
    replacement_node: str | None
    steps: list[str]
    applied_now: bool


RELOCATE_OPTIONS = activity_options(start_to_close=300, heartbeat=30, max_attempts=5)

# ---------------------------------------------------------------------------- verify


class VerifyCapacityInput(BaseModel):
    namespace: str
    pool: str
    service: str
    target_replicas: int
    warm_floor_target: int
    model: str | None = None
    revision: str | None = None
    failed_nodes: list[str] = Field(default_factory=list)


class VerifyCapacityResult(BaseModel):
    passed: bool
    checks: list[Check]


VERIFY_CAPACITY_OPTIONS = activity_options(start_to_close=60, max_attempts=5)


class ClusterActivities:
    """Activities over one Kubernetes API, holding its clients and the ledger runner."""

    @activity.defn
    def assess_loss(self, input: AssessInput) -> AssessResult:
        """Size the loss, find failure domains and a common cause, read the warm floor."""
        raise NotImplementedError

    @activity.defn
    def read_routing_state(self, input: RoutingStateInput) -> RoutingStateResult:
        """EndpointSlice conditions (not addresses) and the Service's publishNotReadyAddresses."""
        raise NotImplementedError

    @activity.defn
    def deroute_replica(self, input: DerouteInput) -> DerouteResult:
        """Remove the router-only label from the pod (its whole LWS group), then confirm."""
        raise NotImplementedError

    @activity.defn
    def restore_routing_label(self, input: RestoreRoutingInput) -> RestoreRoutingResult:
        """Compensation of deroute_replica."""
        raise NotImplementedError

    @activity.defn
    def force_delete_pod(self, input: ForceDeleteInput) -> ForceDeleteResult:
        """Grace-period-0 delete; refuses without the approval gate's record."""
        raise NotImplementedError

    @activity.defn
    def promote_warm(self, input: PromoteWarmInput) -> PromoteWarmResult:
        """Route to warm replicas of exactly this model and revision."""
        raise NotImplementedError

    @activity.defn
    def demote_warm(self, input: DemoteWarmInput) -> DemoteWarmResult:
        """Compensation of promote_warm."""
        raise NotImplementedError

    @activity.defn
    def scale_pool(self, input: ScaleInput) -> ScaleResult:
        """Set the workload's replicas through its scale subresource."""
        raise NotImplementedError

    @activity.defn
    def estimate_lead_time(self, input: LeadTimeInput) -> LeadTimeResult:
        """Seconds from pod creation to Ready, from past startups, else the default."""
        raise NotImplementedError

    @activity.defn
    def diagnose_pending(self, input: PendingInput) -> PendingResult:
        """Pending pods' events, and fragmentation told apart from shortage."""
        raise NotImplementedError

    @activity.defn
    def cordon_node(self, input: CordonInput) -> CordonResult:
        """Cordon and label the node unqualified until it passes qualification."""
        raise NotImplementedError

    @activity.defn
    def uncordon_node(self, input: UncordonInput) -> UncordonResult:
        """Compensation of cordon_node, and the last step of relocation."""
        raise NotImplementedError

    @activity.defn
    def relocate_misplaced_pod(self, input: RelocateInput) -> RelocateResult:
        """Cordon the wrong node, delete the pod, wait for it to land elsewhere, uncordon."""
        raise NotImplementedError

    @activity.defn
    def verify_capacity(self, input: VerifyCapacityInput) -> VerifyCapacityResult:
        """Ready replicas, ready endpoints, warm floor, failed nodes cordoned: with evidence."""
        raise NotImplementedError
