"""Kubernetes activities of the runbook: assess, deroute, promote, scale, reschedule, verify.

Called from `workflows/replica_loss.py` through `ClusterActivities` (registered by
`activities.build_activities`). Sync activities on the worker's thread pool, using the
official `kubernetes` client; every mutating one goes through `EffectRunner` with the
operation id the workflow passes in, and stamps that id on the object it changes.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import (
    MUTATING_HEARTBEAT_S,
    READ_START_TO_CLOSE_S,
    Check,
    EffectRunnerLike,
    MutatingInput,
    MutatingResult,
    PodRef,
    activity_options,
    heartbeat,
    run_effect,
    this_attempt,
    wait,
)
from activities.config import ActivitySettings
from activities.errors import PermanentError, RefusedError, TemporaryError, k8s_call, k8s_error

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


class PodFacts(BaseModel):
    """What the common-cause check reads from one pod of the pool."""

    name: str
    node: str | None = None
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    waiting_reasons: list[str] = Field(default_factory=list)
    template_hash: str | None = None
    lost: bool = False
    # A container that exited with an error and was restarted (between two crashes of a
    # crash loop its waiting reason is gone: it is loading again).
    crashed: bool = False


class NodeFacts(BaseModel):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    unschedulable: bool = False
    deleting: bool = False
    taints: list[str] = Field(default_factory=list)
    conditions: dict[str, str] = Field(default_factory=dict)


class RolloutFacts(BaseModel):
    workload: str
    in_progress: bool
    detail: str = ""


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


ASSESS_OPTIONS = activity_options(start_to_close=READ_START_TO_CLOSE_S, max_attempts=8)

# ---------------------------------------------------------------------------- routing


class EndpointState(BaseModel):
    pod: str | None
    node: str | None = None
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


READ_ROUTING_OPTIONS = activity_options(start_to_close=READ_START_TO_CLOSE_S, max_attempts=8)


class DerouteInput(MutatingInput):
    namespace: str
    service: str
    pod: str
    # Seconds to wait for the endpoint to leave the ready set before failing the attempt.
    confirm_timeout_s: float = 60.0
    # Attempts that wait for it; the last one reports the deroute unconfirmed instead of
    # failing, so the workflow can ask an operator for the force delete.
    confirm_attempts: int = Field(default=2, ge=1)


class DerouteResult(MutatingResult):
    pods: list[str]
    group: str | None = None
    label_removed: str
    already_out: list[str] = Field(default_factory=list)
    applied_now: bool
    confirmed: bool
    routing: RoutingStateResult | None = None
    controller_selector: dict[str, str] = Field(default_factory=dict)


DEROUTE_OPTIONS = activity_options(
    start_to_close=120, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


class ForceDeleteInput(MutatingInput):
    namespace: str
    pod: str
    # The approval gate's record; without it the activity refuses.
    approved_by: str | None = None
    approval_reason: str = ""
    # The uid of the pod the approval was for: a recreated pod of the same name is spared.
    uid: str | None = None


class ForceDeleteResult(MutatingResult):
    pod: str
    deleted: bool
    applied_now: bool
    approved_by: str


FORCE_DELETE_OPTIONS = activity_options(
    start_to_close=60, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=8
)

# ---------------------------------------------------------------------------- warm capacity


class PromoteWarmInput(MutatingInput):
    namespace: str
    pool: str
    model: str
    revision: str
    # How many warm replicas to promote; None promotes every one that qualifies.
    count: int | None = None
    # "label": add the router-only label; "weight": also set the router weight annotation
    # (a probe share, so the replica is warmed up before the ramp gives it more).
    mode: Literal["label", "weight"] = "label"
    weight: int = 100


class PromoteWarmResult(MutatingResult):
    promoted: list[PodRef]
    skipped: dict[str, str] = Field(default_factory=dict)
    mode: str
    applied_now: bool


PROMOTE_WARM_OPTIONS = activity_options(
    start_to_close=60, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


class DemoteWarmInput(MutatingInput):
    """Compensation of promote_warm."""

    namespace: str
    pods: list[str]
    mode: Literal["label", "weight"] = "label"


class DemoteWarmResult(MutatingResult):
    pods: list[str]
    applied_now: bool


DEMOTE_WARM_OPTIONS = activity_options(
    start_to_close=60, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


class ScaleInput(MutatingInput):
    namespace: str
    kind: Literal["Deployment", "LeaderWorkerSet"] = "Deployment"
    name: str
    replicas: int


class ScaleResult(MutatingResult):
    kind: str
    name: str
    previous_replicas: int
    replicas: int
    applied_now: bool


SCALE_OPTIONS = activity_options(start_to_close=60, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10)


class WarmWorkloadInput(BaseModel):
    namespace: str
    pods: list[str]


class WarmWorkloadResult(BaseModel):
    """The controller that owns the warm spares: scaling it up rebuilds the warm floor."""

    kind: Literal["Deployment", "LeaderWorkerSet"] | None = None
    name: str | None = None
    replicas: int = 0
    reason: str = ""


WARM_WORKLOAD_OPTIONS = activity_options(start_to_close=READ_START_TO_CLOSE_S, max_attempts=10)


class LeadTimeInput(BaseModel):
    namespace: str
    pool: str
    default_s: float | None = None


class LeadTimeResult(BaseModel):
    seconds: float
    source: Literal["observed", "default"]
    samples: list[float] = Field(default_factory=list)
    quantile: float = 0.9


LEAD_TIME_OPTIONS = activity_options(start_to_close=READ_START_TO_CLOSE_S, max_attempts=8)


class PendingInput(BaseModel):
    namespace: str
    pool: str


class PendingPod(BaseModel):
    pod: str
    gpus_requested: int
    reasons: list[str]
    messages: list[str]


class PendingResult(BaseModel):
    diagnosis: Literal["none-pending", "fragmentation", "shortage", "unschedulable", "other"]
    explanation: str
    pending: list[PendingPod] = Field(default_factory=list)
    free_gpus_total: int
    free_gpus_by_node: dict[str, int] = Field(default_factory=dict)
    largest_free_block: int


PENDING_OPTIONS = activity_options(start_to_close=READ_START_TO_CLOSE_S, max_attempts=8)


class ReplacementsInput(BaseModel):
    namespace: str
    pool: str
    # Pods that are not replacements: the survivors, the lost, the promoted spares.
    known: list[str] = Field(default_factory=list)


class Replacement(BaseModel):
    pod: PodRef
    ready: bool
    # Why it will not become Ready by waiting (ImagePullBackOff, CrashLoopBackOff...).
    stuck: str | None = None


class ReplacementsResult(BaseModel):
    replacements: list[Replacement] = Field(default_factory=list)


REPLACEMENTS_OPTIONS = activity_options(start_to_close=READ_START_TO_CLOSE_S, max_attempts=8)

# ---------------------------------------------------------------------------- nodes


class CordonResult(MutatingResult):
    node: str
    unschedulable: bool
    qualified_label: str | None
    applied_now: bool


class UncordonResult(MutatingResult):
    node: str
    unschedulable: bool
    applied_now: bool


class RelocateInput(MutatingInput):
    """A replacement landed on a node pool it does not belong in."""

    namespace: str
    pod: str
    wait_rescheduled_s: float = 120.0


class RelocateResult(MutatingResult):
    pod: str
    wrong_node: str
    replacement: str | None
    replacement_node: str | None
    steps: list[str]
    applied_now: bool


RELOCATE_OPTIONS = activity_options(
    start_to_close=300, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=8
)

# ---------------------------------------------------------------------------- verify


class VerifyCapacityInput(BaseModel):
    namespace: str
    pool: str
    service: str
    target_replicas: int
    # Ready endpoints expected in the Service's slices; defaults to target_replicas.
    target_endpoints: int | None = None
    warm_floor_target: int
    model: str | None = None
    revision: str | None = None
    failed_nodes: list[str] = Field(default_factory=list)
    # The pool's pods when the incident began: only the others, its replacements, are
    # checked for placement. None checks every serving pod.
    present_before: list[str] | None = None


class VerifyCapacityResult(BaseModel):
    passed: bool
    checks: list[Check]


# The check whose failed evidence lists the pods the roll-back relocates (the workflow
# reads it by this name).
PLACEMENT_CHECK = "replacement-placement"

VERIFY_CAPACITY_OPTIONS = activity_options(start_to_close=READ_START_TO_CLOSE_S, max_attempts=8)


# ---------------------------------------------------------------------------- pure logic

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
CRASH_LOOP = "CrashLoopBackOff"
# A container waiting for one of these does not start by itself: waiting for it is futile.
STUCK_REASONS = IMAGE_PULL_REASONS | {CRASH_LOOP}
FILESYSTEM_WORDS = ("ephemeral-storage", "nodefs", "imagefs", "no space left")
# Set by a cordon on the node it cordons: whether the node was unschedulable before it.
WAS_UNSCHEDULABLE = "fleetmend.io/was-unschedulable"
NODE_POOL_OPERATION_TAINTS = frozenset(
    {
        "ToBeDeletedByClusterAutoscaler",
        "DeletionCandidateOfClusterAutoscaler",
        "node.kubernetes.io/unschedulable",
        "karpenter.sh/disrupted",
        "cloud.google.com/impending-node-termination",
    }
)


def severity_of(
    *, pool_size: int, lost: int, largest_domain_loss: int, outage_fraction: float = 0.25
) -> tuple[Severity, str]:
    """Severity from the size of the loss and how concentrated it is (pure; table-tested).

    The runbook's anchors: one replica of eight is a capacity event; three of eight in one
    rack is an outage. A correlated loss (two or more in one failure domain) is worse than
    the same number scattered, because the next failure is likely in the same place.
    """
    if pool_size <= 0 or lost >= pool_size:
        return "outage", f"{lost} of {pool_size} replicas lost: nothing left serving"
    fraction = lost / pool_size
    share = f"{lost} of {pool_size} replicas ({fraction:.0%})"
    correlated = largest_domain_loss >= 2
    if fraction >= 2 * outage_fraction:
        return "outage", f"{share} lost, >= {2 * outage_fraction:.0%} of the pool"
    if correlated and fraction >= outage_fraction:
        return "outage", (
            f"{share} lost, {largest_domain_loss} in one failure domain, "
            f">= {outage_fraction:.0%} of the pool"
        )
    if correlated:
        return "major", f"{share} lost, {largest_domain_loss} in one failure domain"
    if fraction >= outage_fraction:
        return "major", f"{share} lost across separate domains, >= {outage_fraction:.0%}"
    return "capacity-event", f"{share} lost, no two in one failure domain"


def losses_inside_window(losses: list[LossReport], window_s: float) -> int:
    """How many losses started within `window_s` of the first (unknown start times count)."""
    known = sorted(loss.starts_at for loss in losses if loss.starts_at is not None)
    unknown = sum(1 for loss in losses if loss.starts_at is None)
    if not known:
        return unknown
    first = known[0]
    return unknown + sum(1 for t in known if (t - first).total_seconds() <= window_s)


def detect_common_causes(
    *,
    losses: list[LossReport],
    pods: list[PodFacts],
    lost_nodes: list[NodeFacts],
    rollout: RolloutFacts | None,
    settings: ActivitySettings,
) -> list[CommonCauseFinding]:
    """A shared cause behind several losses inside a minute (pure; table-tested)."""
    if losses_inside_window(losses, settings.common_cause_window_s) < 2:
        return []
    findings: list[CommonCauseFinding] = []
    lost_pods = [p for p in pods if p.lost]
    hashes = sorted({p.template_hash for p in lost_pods if p.template_hash})
    # Several pods of one template crashing on start is that template, not hardware: a
    # rollout that finished (every replica replaced at once) still shipped a bad revision.
    crashing = sorted(p.name for p in lost_pods if p.crashed or CRASH_LOOP in p.waiting_reasons)
    crash_hashes = {p.template_hash for p in lost_pods if p.name in crashing}
    bad_template = len(crashing) >= 2 and len(crash_hashes) == 1
    if (rollout is not None and rollout.in_progress) or len(hashes) > 1 or bad_template:
        findings.append(
            CommonCauseFinding(
                cause="rollout",
                evidence={
                    "workload": rollout.workload if rollout else None,
                    "detail": rollout.detail if rollout else "",
                    "template_hashes_of_lost_pods": hashes,
                    "crash_looping": crashing,
                },
            )
        )
    pulling = sorted(p.name for p in pods if IMAGE_PULL_REASONS & set(p.waiting_reasons))
    if pulling:
        findings.append(
            CommonCauseFinding(
                cause="image-pull",
                evidence={"pods": pulling, "reasons": sorted(IMAGE_PULL_REASONS)},
            )
        )
    pressured = sorted(n.name for n in lost_nodes if n.conditions.get("DiskPressure") == "True")
    evicted_fs = sorted(
        p.name
        for p in pods
        if (p.reason or "") == "Evicted"
        and any(w in (p.message or "").lower() for w in FILESYSTEM_WORDS)
    )
    if pressured or evicted_fs:
        findings.append(
            CommonCauseFinding(
                cause="node-filesystem-full",
                evidence={
                    "nodes_with_disk_pressure": pressured,
                    "pods_evicted_for_disk": evicted_fs,
                },
            )
        )
    if len(lost_nodes) >= 2:
        pools = {
            next((n.labels[k] for k in settings.node_pool_labels if k in n.labels), None)
            for n in lost_nodes
        }
        operated = [
            n.name
            for n in lost_nodes
            if n.unschedulable or n.deleting or NODE_POOL_OPERATION_TAINTS & set(n.taints)
        ]
        if len(pools) == 1 and None not in pools and operated:
            findings.append(
                CommonCauseFinding(
                    cause="node-pool-operation",
                    evidence={"node_pool": pools.pop(), "nodes_cordoned_or_deleting": operated},
                )
            )
        for label in (settings.fabric_label, settings.rack_label):
            values = {n.labels.get(label) for n in lost_nodes}
            if len(values) == 1 and None not in values:
                findings.append(
                    CommonCauseFinding(
                        cause="fabric-domain",
                        evidence={
                            "label": label,
                            "domain": values.pop(),
                            "nodes": sorted(n.name for n in lost_nodes),
                        },
                    )
                )
                break
    return findings


def lead_time_from_samples(
    samples: list[float], default_s: float, quantile: float = 0.9
) -> tuple[float, Literal["observed", "default"]]:
    """The provisioning lead time to announce: a high quantile of past startups, else default.

    Nearest-rank quantile, so the number announced is one that actually happened.
    """
    clean = sorted(s for s in samples if s >= 0)
    if not clean:
        return float(default_s), "default"
    rank = max(1, math.ceil(quantile * len(clean)))
    return float(clean[rank - 1]), "observed"


def diagnose_scheduling(
    pending: list[PendingPod], free_by_node: dict[str, int], gpu_resource: str = "nvidia.com/gpu"
) -> tuple[str, str, int]:
    """Fragmentation (free GPUs, no admissible placement) told apart from shortage (pure).

    Returns (diagnosis, explanation, largest free block on one node).
    """
    free_total = sum(max(0, v) for v in free_by_node.values())
    largest = max((v for v in free_by_node.values()), default=0)
    if not pending:
        return "none-pending", "no pod of the pool is Pending", largest
    gpu_blocked = [
        p for p in pending if any(f"Insufficient {gpu_resource}" in m for m in p.messages)
    ]
    if not gpu_blocked:
        unschedulable = [p for p in pending if "FailedScheduling" in p.reasons]
        if unschedulable:
            return (
                "unschedulable",
                f"{len(unschedulable)} pod(s) FailedScheduling for reasons other than GPUs: "
                + "; ".join(unschedulable[0].messages[-1:]),
                largest,
            )
        return "other", f"{len(pending)} pod(s) Pending without a scheduling failure yet", largest
    need_each = max(p.gpus_requested for p in gpu_blocked)
    need_total = sum(p.gpus_requested for p in gpu_blocked)
    if free_total >= need_each and largest < need_each:
        return (
            "fragmentation",
            f"{free_total} GPUs free across {sum(1 for v in free_by_node.values() if v > 0)} "
            f"nodes but the largest block on one node is {largest} < {need_each} needed "
            "per pod: the GPUs exist, an admissible placement does not",
            largest,
        )
    if free_total < need_total:
        return (
            "shortage",
            f"{need_total} GPUs needed by {len(gpu_blocked)} Pending pod(s), "
            f"{free_total} free in schedulable nodes",
            largest,
        )
    return (
        "other",
        f"{free_total} GPUs free, largest block {largest} >= {need_each} needed: "
        "the scheduler's reason is not capacity (taints, affinity, qualification)",
        largest,
    )


@dataclass(frozen=True)
class NodePoolPreference:
    """The node pool a workload's pods should land in: a node label and its values."""

    label: str
    values: frozenset[str]
    weight: int


def preferred_node_pool(affinity: Any, labels: Sequence[str]) -> NodePoolPreference | None:
    """The heaviest preferred node-affinity term on a node-pool label, if the template has one.

    Only a preference can be broken: a required term (or a nodeSelector) keeps the
    scheduler off other pools, so a pod on the wrong pool exists only under a preference
    the scheduler could not honour, for example when the preferred pool was full.
    """
    node_affinity = getattr(affinity, "node_affinity", None)
    best: NodePoolPreference | None = None
    for term in (
        getattr(node_affinity, "preferred_during_scheduling_ignored_during_execution", None) or []
    ):
        expressions = getattr(term.preference, "match_expressions", None) or []
        for e in expressions:
            if e.key in labels and e.operator == "In" and e.values:
                found = NodePoolPreference(e.key, frozenset(e.values), int(term.weight or 0))
                if best is None or found.weight > best.weight:
                    best = found
    return best


def misplaced_pods(
    node_of_pod: Mapping[str, str | None],
    labels_of_node: Mapping[str, Mapping[str, str]],
    preference: NodePoolPreference,
) -> dict[str, str | None]:
    """Scheduled pods on a node outside the preferred pool, with that node's pool value."""
    out: dict[str, str | None] = {}
    for pod, node in sorted(node_of_pod.items()):
        if node is None:
            continue
        value = (labels_of_node.get(node) or {}).get(preference.label)
        if value not in preference.values:
            out[pod] = value
    return out


# ---------------------------------------------------------------------------- object helpers


def _labels(obj: Any) -> dict[str, str]:
    return dict((obj.metadata.labels if obj and obj.metadata else None) or {})


def _annotations(obj: Any) -> dict[str, str]:
    return dict((obj.metadata.annotations if obj and obj.metadata else None) or {})


def _condition(obj: Any, type_: str) -> Any:
    for c in (obj.status.conditions if obj.status else None) or []:
        if c.type == type_:
            return c
    return None


def pod_ready(pod: Any) -> bool:
    c = _condition(pod, "Ready")
    return bool(c is not None and c.status == "True") and pod.metadata.deletion_timestamp is None


def observed_lost(pod: Any, node: Any | None) -> bool:
    """A pod that was serving and is observably down: node not Ready, being deleted, failed
    or evicted, or a container that restarted and is not ready again (OOM, crash loop)."""
    if node is not None and not node_ready(node):
        return True
    if pod.metadata.deletion_timestamp is not None:
        return True
    status = pod.status
    if status is not None and (status.phase == "Failed" or status.reason == "Evicted"):
        return True
    restarted = (
        any((cs.restart_count or 0) > 0 for cs in (status.container_statuses or []))
        if status
        else False
    )
    return restarted and not pod_ready(pod)


def node_ready(node: Any) -> bool:
    c = _condition(node, "Ready")
    return bool(c is not None and c.status == "True")


def startup_seconds(pod: Any) -> float | None:
    """Creation to Ready of a pod that became Ready (a past provisioning lead time)."""
    c = _condition(pod, "Ready")
    created = pod.metadata.creation_timestamp
    if c is None or c.status != "True" or c.last_transition_time is None or created is None:
        return None
    return max(0.0, (c.last_transition_time - created).total_seconds())


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A LabelSelector (client model or dict) against labels; an empty selector matches none."""
    if selector is None:
        return False
    if isinstance(selector, dict):
        match_labels = selector.get("matchLabels") or {}
        expressions = selector.get("matchExpressions") or []
    else:
        match_labels = selector.match_labels or {}
        expressions = [
            {"key": e.key, "operator": e.operator, "values": e.values}
            for e in (selector.match_expressions or [])
        ]
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for e in expressions:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selector_keys(selector: Any) -> set[str]:
    if selector is None:
        return set()
    if isinstance(selector, dict):
        keys = set((selector.get("matchLabels") or {}).keys())
        keys |= {e["key"] for e in selector.get("matchExpressions") or []}
        return keys
    keys = set((selector.match_labels or {}).keys())
    keys |= {e.key for e in selector.match_expressions or []}
    return keys


def _gpu_quantity(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def pod_gpus(pod: Any, resource: str) -> int:
    total = 0
    for c in (pod.spec.containers if pod.spec else None) or []:
        requests = (c.resources.requests if c.resources else None) or {}
        limits = (c.resources.limits if c.resources else None) or {}
        total += _gpu_quantity(requests.get(resource, limits.get(resource, 0)))
    return total


# ---------------------------------------------------------------------------- activities

LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_VERSION = "v1"
LWS_PLURAL = "leaderworkersets"


class ClusterActivities:
    """Activities over one Kubernetes API, holding its clients and the ledger runner."""

    def __init__(
        self,
        api: ApiClient,
        runner: EffectRunnerLike,
        settings: ActivitySettings | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.runner = runner
        self.s = settings or ActivitySettings()

    # ------------------------------------------------------------------ reading

    def _call(self, verb: str, obj: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.s.kubernetes_timeout_s)
        return k8s_call(verb, obj, lambda: fn(*args, **kwargs))

    def _read_pod(self, namespace: str, name: str) -> Any:
        return self._call(
            "get", f"pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace
        )

    def _try_read_pod(self, namespace: str, name: str) -> Any | None:
        try:
            return self.core.read_namespaced_pod(
                name, namespace, _request_timeout=self.s.kubernetes_timeout_s
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise k8s_error(exc, verb="get", obj=f"pod {namespace}/{name}") from exc
        except Exception as exc:
            raise k8s_error(exc, verb="get", obj=f"pod {namespace}/{name}") from exc

    def _list_pods(self, namespace: str, selector: str) -> list[Any]:
        res = self._call(
            "list",
            f"pods {namespace} -l {selector}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=selector,
        )
        return list(res.items or [])

    def _nodes(self) -> dict[str, Any]:
        res = self._call("list", "nodes", self.core.list_node)
        return {n.metadata.name: n for n in res.items or []}

    def _metrics_url(self, pod: Any) -> str | None:
        ip = pod.status.pod_ip if pod.status else None
        if not ip:
            return None
        port = self.s.metrics_port
        for c in (pod.spec.containers if pod.spec else None) or []:
            for p in c.ports or []:
                if p.name == self.s.metrics_port_name:
                    port = p.container_port
        return f"{self.s.metrics_scheme}://{ip}:{port}"

    def _ref(self, pod: Any) -> PodRef:
        return PodRef(
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            node=pod.spec.node_name if pod.spec else None,
            ip=pod.status.pod_ip if pod.status else None,
            metrics_url=self._metrics_url(pod),
            labels=_labels(pod),
        )

    def _replica_key(self, pod: Any) -> str:
        labels = _labels(pod)
        lws = labels.get(self.s.lws_name_label)
        group = labels.get(self.s.lws_group_label)
        if lws is not None and group is not None:
            return f"{lws}-{group}"
        return str(pod.metadata.name)

    def _is_warm(self, pod: Any) -> bool:
        return _labels(pod).get(self.s.warm_label) == self.s.warm_label_value

    def _controllers(self, namespace: str) -> list[tuple[str, str, Any, Any]]:
        """(kind, name, selector, object) of every workload controller in the namespace."""
        out: list[tuple[str, str, Any, Any]] = []
        deployments = self._call(
            "list", f"deployments {namespace}", self.apps.list_namespaced_deployment, namespace
        )
        for d in deployments.items or []:
            out.append(("Deployment", d.metadata.name, d.spec.selector, d))
        replicasets = self._call(
            "list", f"replicasets {namespace}", self.apps.list_namespaced_replica_set, namespace
        )
        for r in replicasets.items or []:
            out.append(("ReplicaSet", r.metadata.name, r.spec.selector, r))
        for item in self._list_lws(namespace):
            # LWS selects its pods by its name label; it has no spec.selector of its own.
            selector = {"matchLabels": {self.s.lws_name_label: item["metadata"]["name"]}}
            out.append(("LeaderWorkerSet", item["metadata"]["name"], selector, item))
        return out

    def _list_raw(self, obj: str, fn: Callable[..., Any], namespace: str) -> list[dict[str, Any]]:
        """A namespaced list as plain JSON: no client models built for what is read once."""
        response = self._call("list", obj, fn, namespace, _preload_content=False)
        try:
            items = json.loads(response.data).get("items")
        finally:
            response.release_conn()
        return list(items or [])

    def _controller_selectors(self, namespace: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(kind, name, selector) of every workload controller in the namespace.

        Read as JSON rather than client models: building 25 Deployments and their
        ReplicaSets as models was a fifth of the worker's activity CPU in the
        time-to-deroute profile, and it happens before the label comes off.
        """
        out: list[tuple[str, str, dict[str, Any]]] = []
        for kind, obj, fn in (
            ("Deployment", "deployments", self.apps.list_namespaced_deployment),
            ("ReplicaSet", "replicasets", self.apps.list_namespaced_replica_set),
        ):
            for item in self._list_raw(f"{obj} {namespace}", fn, namespace):
                selector = (item.get("spec") or {}).get("selector") or {}
                out.append((kind, item["metadata"]["name"], selector))
        for item in self._list_lws(namespace):
            selector = {"matchLabels": {self.s.lws_name_label: item["metadata"]["name"]}}
            out.append(("LeaderWorkerSet", item["metadata"]["name"], selector))
        return out

    def _list_lws(self, namespace: str) -> list[dict[str, Any]]:
        """LeaderWorkerSets in the namespace; none where the CRD is not installed (404)."""
        lws: Any
        try:
            lws = self.custom.list_namespaced_custom_object(
                LWS_GROUP,
                LWS_VERSION,
                namespace,
                LWS_PLURAL,
                _request_timeout=self.s.kubernetes_timeout_s,
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise k8s_error(exc, verb="list", obj=f"leaderworkersets {namespace}") from exc
        except Exception as exc:
            raise k8s_error(exc, verb="list", obj=f"leaderworkersets {namespace}") from exc
        return list(lws.get("items", []))

    def _endpoint_states(self, namespace: str, service: str) -> list[EndpointState]:
        slices = self._call(
            "list",
            f"endpointslices {namespace} -l kubernetes.io/service-name={service}",
            self.discovery.list_namespaced_endpoint_slice,
            namespace,
            label_selector=f"kubernetes.io/service-name={service}",
        )
        states: list[EndpointState] = []
        for sl in slices.items or []:
            for ep in sl.endpoints or []:
                cond = ep.conditions
                states.append(
                    EndpointState(
                        pod=ep.target_ref.name if ep.target_ref else None,
                        node=ep.node_name,
                        address=(ep.addresses or [""])[0],
                        ready=cond.ready if cond else None,
                        serving=cond.serving if cond else None,
                        terminating=cond.terminating if cond else None,
                    )
                )
        return states

    def _routing_state(self, namespace: str, service: str, pods: list[str]) -> RoutingStateResult:
        svc = self._call(
            "get",
            f"service {namespace}/{service}",
            self.core.read_namespaced_service,
            service,
            namespace,
        )
        publish = bool(svc.spec.publish_not_ready_addresses)
        endpoints = self._endpoint_states(namespace, service)
        still: dict[str, str] = {}
        for ep in endpoints:
            if ep.pod not in pods:
                continue
            if ep.routable:
                still[ep.pod] = f"listed with ready={ep.ready} at {ep.address}"
            elif publish and not ep.terminating:
                still[ep.pod] = (
                    f"listed not ready at {ep.address}, but the Service publishes "
                    "not-ready addresses"
                )
        return RoutingStateResult(
            service=service,
            publish_not_ready_addresses=publish,
            endpoints=endpoints,
            still_routable=still,
        )

    # ------------------------------------------------------------------ assess

    @activity.defn
    def assess_loss(self, input: AssessInput) -> AssessResult:
        """Size the loss, find failure domains and a common cause, read the warm floor."""
        s = self.s
        pods = self._list_pods(input.namespace, f"{s.pool_label}={input.pool}")
        nodes = self._nodes()
        serving = [p for p in pods if not self._is_warm(p)]
        by_name = {p.metadata.name: p for p in pods}

        workload_kind, workload_name, desired, rollout = self._workload(input.namespace, input.pool)
        lost_keys: set[str] = set()
        lost_pod_names: set[str] = set()
        lost_nodes: set[str] = set()
        for loss in input.losses:
            if loss.pod:
                pod = by_name.get(loss.pod)
                lost_keys.add(self._replica_key(pod) if pod is not None else loss.pod)
                lost_pod_names.add(loss.pod)
                node = loss.node or (pod.spec.node_name if pod is not None and pod.spec else None)
                if node:
                    lost_nodes.add(node)
            elif loss.node:
                lost_nodes.add(loss.node)
                for p in serving:
                    if p.spec and p.spec.node_name == loss.node:
                        lost_keys.add(self._replica_key(p))
                        lost_pod_names.add(p.metadata.name)
        # Replicas that are observably down count as lost whether or not they alerted yet;
        # a replacement still being scheduled or started is capacity on its way, not a loss.
        provisioning: set[str] = set()
        for p in serving:
            node = nodes.get(p.spec.node_name) if p.spec and p.spec.node_name else None
            if observed_lost(p, node):
                lost_keys.add(self._replica_key(p))
                lost_pod_names.add(p.metadata.name)
                if node is not None and not node_ready(node):
                    lost_nodes.add(node.metadata.name)
            elif not pod_ready(p):
                provisioning.add(self._replica_key(p))

        keys = ({self._replica_key(p) for p in serving} - provisioning) | lost_keys
        pool_size = desired if desired else len(keys)

        domains = FailureDomains(nodes=sorted(lost_nodes))
        per_domain: dict[tuple[str, str], set[str]] = {}
        for key in lost_keys:
            members = [p for p in serving if self._replica_key(p) == key]
            node_names = {p.spec.node_name for p in members if p.spec and p.spec.node_name}
            # A pod already gone still names its node in the alert.
            node_names |= {loss.node for loss in input.losses if loss.node and loss.pod == key}
            for n in node_names:
                node = nodes.get(n)
                labels = _labels(node)
                for kind, label in (
                    ("zone", s.zone_label),
                    ("rack", s.rack_label),
                    ("fabric", s.fabric_label),
                ):
                    value = labels.get(label)
                    if value:
                        getattr(domains, f"{kind}s").append(value)
                        if kind != "zone":
                            per_domain.setdefault((kind, value), set()).add(key)
                per_domain.setdefault(("node", n), set()).add(key)
        for field_name in ("zones", "racks", "fabrics"):
            setattr(domains, field_name, sorted(set(getattr(domains, field_name))))
        largest = max((len(v) for v in per_domain.values()), default=min(1, len(lost_keys)))
        severity, reason = severity_of(
            pool_size=pool_size,
            lost=len(lost_keys),
            largest_domain_loss=largest,
            outage_fraction=input.outage_fraction,
        )

        facts = [self._pod_facts(p, lost=p.metadata.name in lost_pod_names) for p in serving]
        node_facts = [self._node_facts(nodes[n]) for n in sorted(lost_nodes) if n in nodes]
        causes = detect_common_causes(
            losses=input.losses, pods=facts, lost_nodes=node_facts, rollout=rollout, settings=s
        )

        model, revision = self._model_of(serving)
        survivors = [
            self._ref(p)
            for p in serving
            if self._replica_key(p) not in lost_keys
            and pod_ready(p)
            and _labels(p).get(s.router_label) == s.router_label_value
        ]
        warm = self._warm_floor(input.namespace, input.pool, model, revision, nodes)
        return AssessResult(
            namespace=input.namespace,
            pool=input.pool,
            pool_size=pool_size,
            lost_replicas=sorted(lost_keys),
            lost_nodes=sorted(lost_nodes),
            lost_fraction=min(1.0, len(lost_keys) / pool_size) if pool_size else 1.0,
            domains=domains,
            largest_domain_loss=largest,
            severity=severity,
            severity_reason=reason,
            common_causes=causes,
            survivors=survivors,
            warm_floor=warm,
            workload_kind=workload_kind,
            workload_name=workload_name,
            model=model,
            revision=revision,
        )

    def _workload(
        self, namespace: str, pool: str
    ) -> tuple[str | None, str | None, int | None, RolloutFacts | None]:
        """The pool's workload controller, its desired replicas and whether it is rolling out."""
        d: Any
        try:
            d = self.apps.read_namespaced_deployment(
                pool, namespace, _request_timeout=self.s.kubernetes_timeout_s
            )
        except ApiException as exc:
            if exc.status != 404:
                raise k8s_error(exc, verb="get", obj=f"deployment {namespace}/{pool}") from exc
            d = self._deployment_selecting(namespace, pool)
        if d is not None:
            pool = d.metadata.name
            desired = d.spec.replicas or 0
            st = d.status
            updated = (st.updated_replicas or 0) if st else 0
            behind = (st.observed_generation or 0) < (d.metadata.generation or 0) if st else True
            in_progress = behind or updated < desired
            detail = (
                f"updatedReplicas {updated}/{desired}, observedGeneration "
                f"{st.observed_generation if st else None}/{d.metadata.generation}"
            )
            return (
                "Deployment",
                pool,
                desired,
                RolloutFacts(workload=f"Deployment/{pool}", in_progress=in_progress, detail=detail),
            )
        lws: Any
        try:
            lws = self.custom.get_namespaced_custom_object(
                LWS_GROUP,
                LWS_VERSION,
                namespace,
                LWS_PLURAL,
                pool,
                _request_timeout=self.s.kubernetes_timeout_s,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise k8s_error(exc, verb="get", obj=f"leaderworkerset {namespace}/{pool}") from exc
            return None, None, None, None
        desired = int(lws.get("spec", {}).get("replicas") or 0)
        lws_status = lws.get("status") or {}
        updated = int(lws_status.get("updatedReplicas") or 0)
        return (
            "LeaderWorkerSet",
            pool,
            desired,
            RolloutFacts(
                workload=f"LeaderWorkerSet/{pool}",
                in_progress=updated < desired,
                detail=f"updatedReplicas {updated}/{desired}",
            ),
        )

    def _deployment_selecting(self, namespace: str, pool: str) -> Any | None:
        """The Deployment that owns the pool's serving pods when it is not named after it."""
        s = self.s
        deployments = self._call(
            "list", f"deployments {namespace}", self.apps.list_namespaced_deployment, namespace
        )
        for d in deployments.items or []:
            meta = d.spec.template.metadata
            labels = dict((meta.labels if meta else None) or {})
            serving = (
                labels.get(s.pool_label) == pool and labels.get(s.warm_label) != s.warm_label_value
            )
            if serving and selector_matches(d.spec.selector, labels):
                return d
        return None

    def _pod_facts(self, pod: Any, *, lost: bool) -> PodFacts:
        waiting: list[str] = []
        crashed = False
        for cs in (pod.status.container_statuses if pod.status else None) or []:
            if cs.state and cs.state.waiting and cs.state.waiting.reason:
                waiting.append(cs.state.waiting.reason)
            last = cs.last_state.terminated if cs.last_state else None
            crashed = crashed or bool(
                (cs.restart_count or 0) > 0
                and last is not None
                and last.exit_code
                and last.reason != "OOMKilled"
            )
        return PodFacts(
            name=pod.metadata.name,
            node=pod.spec.node_name if pod.spec else None,
            phase=pod.status.phase if pod.status else None,
            reason=pod.status.reason if pod.status else None,
            message=pod.status.message if pod.status else None,
            waiting_reasons=waiting,
            template_hash=_labels(pod).get("pod-template-hash"),
            lost=lost,
            crashed=crashed,
        )

    def _node_facts(self, node: Any) -> NodeFacts:
        return NodeFacts(
            name=node.metadata.name,
            labels=_labels(node),
            unschedulable=bool(node.spec.unschedulable) if node.spec else False,
            deleting=node.metadata.deletion_timestamp is not None,
            taints=[t.key for t in (node.spec.taints if node.spec else None) or []],
            conditions={c.type: c.status for c in (node.status.conditions or [])}
            if node.status
            else {},
        )

    def _model_of(self, pods: list[Any]) -> tuple[str | None, str | None]:
        """The model and revision most of the pool's serving pods carry."""
        counts: dict[tuple[str | None, str | None], int] = {}
        for p in pods:
            labels = _labels(p)
            key = (labels.get(self.s.model_label), labels.get(self.s.revision_label))
            counts[key] = counts.get(key, 0) + 1
        if not counts:
            return None, None
        return max(counts.items(), key=lambda kv: (kv[1], str(kv[0])))[0]

    def _warm_floor(
        self,
        namespace: str,
        pool: str,
        model: str | None,
        revision: str | None,
        nodes: dict[str, Any],
    ) -> WarmFloor:
        s = self.s
        warm = self._list_pods(
            namespace, f"{s.warm_label}={s.warm_label_value},{s.pool_label}={pool}"
        )
        floor = WarmFloor(model=model, revision=revision)
        for leader, members in self._replicas(warm):
            reason = self._warm_disqualified(leader, model, revision, nodes, members)
            if reason:
                floor.excluded[leader.metadata.name] = reason
            else:
                floor.ready.append(self._ref(leader))
        return floor

    def _replicas(self, pods: list[Any]) -> list[tuple[Any, list[Any]]]:
        """`pods` as replicas, each (leader, members): a LeaderWorkerSet group is one
        replica that only its leader (worker index 0) represents; any other pod is its own."""
        s = self.s
        groups: dict[tuple[str, str], list[Any]] = {}
        for p in pods:
            labels = _labels(p)
            lws, group = labels.get(s.lws_name_label), labels.get(s.lws_group_label)
            key = (lws, group) if lws is not None and group is not None else ("", p.metadata.name)
            groups.setdefault(key, []).append(p)
        out = []
        for members in groups.values():
            members.sort(key=lambda p: int(_labels(p).get(s.lws_worker_index_label) or 0))
            out.append((members[0], members))
        return sorted(out, key=lambda r: str(r[0].metadata.name))

    def _warm_disqualified(
        self,
        pod: Any,
        model: str | None,
        revision: str | None,
        nodes: dict[str, Any],
        members: list[Any] | None = None,
    ) -> str | None:
        s = self.s
        labels = _labels(pod)
        if model is not None and labels.get(s.model_label) != model:
            return f"model {labels.get(s.model_label)!r} is not {model!r}"
        if revision is not None and labels.get(s.revision_label) != revision:
            return f"revision {labels.get(s.revision_label)!r} is not {revision!r}"
        if labels.get(s.router_label) == s.router_label_value:
            return "already serving"
        # A group serves only with every rank up: one unready worker disqualifies it.
        for member in members or [pod]:
            reason = self._member_disqualified(member, nodes)
            if reason:
                return reason if member is pod else f"{member.metadata.name}: {reason}"
        return None

    def _member_disqualified(self, pod: Any, nodes: dict[str, Any]) -> str | None:
        s = self.s
        if not pod_ready(pod):
            return "not Ready (not loaded or not healthy)"
        if not (pod.status and pod.status.pod_ip):
            return "no pod IP: not registered"
        node = nodes.get(pod.spec.node_name) if pod.spec else None
        if node is None or not node_ready(node):
            return f"node {pod.spec.node_name if pod.spec else None} not Ready"
        if node.spec and node.spec.unschedulable:
            return f"node {node.metadata.name} cordoned"
        if _labels(node).get(s.qualified_label) == "false":
            return f"node {node.metadata.name} not qualified"
        return None

    # ------------------------------------------------------------------ routing

    @activity.defn
    def read_routing_state(self, input: RoutingStateInput) -> RoutingStateResult:
        """EndpointSlice conditions (not addresses) and the Service's publishNotReadyAddresses."""
        return self._routing_state(input.namespace, input.service, input.pods)

    def _group_pods(self, namespace: str, pod: Any) -> tuple[str | None, list[Any]]:
        labels = _labels(pod)
        lws = labels.get(self.s.lws_name_label)
        group = labels.get(self.s.lws_group_label)
        if lws is None or group is None:
            return None, [pod]
        members = self._list_pods(
            namespace, f"{self.s.lws_name_label}={lws},{self.s.lws_group_label}={group}"
        )
        return f"{lws}-{group}", sorted(members, key=lambda p: p.metadata.name)

    def _refuse_if_selected(self, namespace: str, pods: list[Any]) -> dict[str, str]:
        """Refuse to strip a label a workload controller selects on; return the selectors."""
        label = self.s.router_label
        seen: dict[str, str] = {}
        for kind, name, selector in self._controller_selectors(namespace):
            for pod in pods:
                if not selector_matches(selector, _labels(pod)):
                    continue
                keys = selector_keys(selector)
                seen[f"{kind}/{name}"] = ",".join(sorted(keys))
                if label in keys:
                    raise RefusedError(
                        f"refusing to remove label {label!r} from pod "
                        f"{namespace}/{pod.metadata.name}: {kind}/{name} selects on it "
                        f"(selector keys {sorted(keys)}); the controller would stop counting "
                        "the pod and create a replacement while the old pod keeps its GPUs. "
                        "Route on a label no workload controller selects."
                    )
        return seen

    @activity.defn
    def deroute_replica(self, input: DerouteInput) -> DerouteResult:
        """Remove the router-only label from the pod (its whole LWS group), then confirm."""
        s = self.s
        pod = self._try_read_pod(input.namespace, input.pod)
        members: list[Any] = []
        group: str | None = None
        if pod is not None:
            group, members = self._group_pods(input.namespace, pod)
        names = [p.metadata.name for p in members] or [input.pod]
        selectors = self._refuse_if_selected(input.namespace, members)

        def apply(op_id: str) -> dict[str, Any]:
            removed, already = [], []
            for name in names:
                current = self._try_read_pod(input.namespace, name)
                if current is None:
                    already.append(name)
                    continue
                stamped = _annotations(current).get(s.op_annotation) == op_id
                if stamped or s.router_label not in _labels(current):
                    already.append(name)
                    continue
                body = {
                    "metadata": {
                        "labels": {s.router_label: None},
                        "annotations": {s.op_annotation: op_id},
                    }
                }
                self._patch_pod(input.namespace, name, body)
                removed.append(name)
            return {"pods": names, "removed": removed, "already_out": already, "group": group}

        def confirm(op_id: str) -> dict[str, Any] | None:
            # Out of the ready set is not proof of the deroute: a dead pod is unready anyway
            # and comes back with its container. After a failed attempt the ledger asks
            # here whether the effect is there, so the label itself must be gone.
            labelled = [
                name
                for name in names
                if (current := self._try_read_pod(input.namespace, name)) is not None
                and s.router_label in _labels(current)
            ]
            if labelled:
                return None
            deadline = time.monotonic() + input.confirm_timeout_s
            while True:
                state = self._routing_state(input.namespace, input.service, names)
                if not state.still_routable:
                    return {"still_routable": {}, "endpoints_seen": len(state.endpoints)}
                if time.monotonic() >= deadline:
                    return None
                wait(s.poll_interval_s, {"still_routable": state.still_routable})

        outcome = run_effect(
            self.runner,
            input,
            kind="deroute-pod",
            target=f"{input.namespace}/pod/{input.pod}",
            intent={"remove_label": s.router_label, "service": input.service, "group": group},
            apply=apply,
            confirm=confirm,
        )
        routing = self._routing_state(input.namespace, input.service, names)
        if input.dry_run:
            confirmed = False
        else:
            confirmed = outcome.confirmed or not routing.still_routable
            if not confirmed and this_attempt() < input.confirm_attempts:
                # The label is off but the router still lists it: retry the confirmation.
                raise TemporaryError(
                    f"deroute pod {input.namespace}/{input.pod}: still in the ready set of "
                    f"service {input.service}: {routing.still_routable}"
                )
        return DerouteResult(
            pods=names,
            group=group,
            label_removed=s.router_label,
            already_out=list(outcome.result.get("already_out", [])),
            applied_now=outcome.applied_now,
            confirmed=confirmed,
            routing=routing,
            controller_selector=selectors,
        )

    def _patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> Any:
        return self._call(
            "patch",
            f"pod {namespace}/{name}",
            self.core.patch_namespaced_pod,
            name,
            namespace,
            body,
        )

    @activity.defn
    def force_delete_pod(self, input: ForceDeleteInput) -> ForceDeleteResult:
        """Grace-period-0 delete; refuses without the approval gate's record."""
        if not (input.approved_by or "").strip():
            raise RefusedError(
                f"refusing to force delete pod {input.namespace}/{input.pod}: no approval. "
                "Force deletion skips graceful shutdown and loses in-flight requests and "
                "post-mortem state; it runs only behind the workflow's approval gate."
            )
        obj = f"pod {input.namespace}/{input.pod}"

        def apply(op_id: str) -> dict[str, Any]:
            current = self._try_read_pod(input.namespace, input.pod)
            if current is None:
                return {"deleted": True, "found": False}
            if input.uid and current.metadata.uid != input.uid:
                # The controller recreated it under the same name: the approval was not for it.
                return {"deleted": True, "found": False, "spared_uid": current.metadata.uid}
            self._patch_pod(
                input.namespace,
                input.pod,
                {"metadata": {"annotations": {self.s.op_annotation: op_id}}},
            )
            options = client.V1DeleteOptions(
                grace_period_seconds=0,
                preconditions=client.V1Preconditions(uid=current.metadata.uid),
            )
            try:
                self.core.delete_namespaced_pod(
                    input.pod,
                    input.namespace,
                    body=options,
                    grace_period_seconds=0,
                    _request_timeout=self.s.kubernetes_timeout_s,
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise k8s_error(exc, verb="delete", obj=obj) from exc
            return {"deleted": True, "found": True, "uid": current.metadata.uid}

        outcome = run_effect(
            self.runner,
            input,
            kind="force-delete-pod",
            target=f"{input.namespace}/pod/{input.pod}",
            intent={
                "grace_period_seconds": 0,
                "approved_by": input.approved_by,
                "uid": input.uid,
            },
            apply=apply,
        )
        return ForceDeleteResult(
            pod=input.pod,
            deleted=bool(outcome.result.get("deleted", False)),
            applied_now=outcome.applied_now,
            approved_by=str(input.approved_by),
        )

    # ------------------------------------------------------------------ warm capacity

    def _exact_warm_selector(self, pool: str, model: str, revision: str) -> str:
        s = self.s
        # Never a bare `pool=warm`: that matches every model's spares in the namespace.
        return (
            f"{s.warm_label}={s.warm_label_value},{s.pool_label}={pool},"
            f"{s.model_label}={model},{s.revision_label}={revision}"
        )

    @activity.defn
    def promote_warm(self, input: PromoteWarmInput) -> PromoteWarmResult:
        """Route to warm replicas of exactly this model and revision."""
        s = self.s
        selector = self._exact_warm_selector(input.pool, input.model, input.revision)
        applied_here: list[bool] = []

        def apply(op_id: str) -> dict[str, Any]:
            applied_here.append(True)
            nodes = self._nodes()
            groups = self._replicas(self._list_pods(input.namespace, selector))
            members = {leader.metadata.name: group for leader, group in groups}
            candidates = [leader for leader, _ in groups]
            promoted: list[str] = []
            skipped: dict[str, str] = {}
            # A retry finds its own earlier promotions by the stamp and counts them first.
            for p in candidates:
                if _annotations(p).get(s.op_annotation) == op_id:
                    promoted.append(p.metadata.name)
            for p in candidates:
                name = p.metadata.name
                if name in promoted:
                    continue
                if input.count is not None and len(promoted) >= input.count:
                    skipped[name] = "enough promoted"
                    continue
                reason = self._warm_disqualified(
                    p, input.model, input.revision, nodes, members[name]
                )
                if reason:
                    skipped[name] = reason
                    continue
                notes: dict[str, Any] = {s.op_annotation: op_id}
                if input.mode == "weight":
                    notes[s.router_weight_annotation] = str(input.weight)
                body = {
                    "metadata": {
                        "labels": {s.router_label: s.router_label_value},
                        "annotations": notes,
                    }
                }
                self._patch_pod(input.namespace, name, body)
                promoted.append(name)
            return {"promoted": promoted, "skipped": skipped, "selector": selector}

        def confirm(op_id: str) -> dict[str, Any] | None:
            # Read back: the pods this operation stamped, and that they now carry the label.
            stamped = [
                p
                for p in self._list_pods(input.namespace, selector)
                if _annotations(p).get(s.op_annotation) == op_id
            ]
            if not stamped and not applied_here:
                # Asked before applying (a retry): an earlier attempt may have died before
                # its first write, so "nothing stamped" is not evidence; apply decides.
                return None
            if any(_labels(p).get(s.router_label) != s.router_label_value for p in stamped):
                return None
            names = sorted(p.metadata.name for p in stamped)
            # A retry that finds the earlier attempt's promotions reports them as promoted.
            return {"routed": names, "promoted": names}

        outcome = run_effect(
            self.runner,
            input,
            kind="promote-warm",
            target=f"{input.namespace}/service/{input.pool}",
            intent={
                "selector": selector,
                "count": input.count,
                "mode": input.mode,
                "weight": input.weight if input.mode == "weight" else None,
            },
            apply=apply,
            confirm=confirm,
        )
        refs = []
        for name in outcome.result.get("promoted", []):
            pod = self._try_read_pod(input.namespace, name)
            if pod is not None:
                refs.append(self._ref(pod))
        return PromoteWarmResult(
            promoted=refs,
            skipped=dict(outcome.result.get("skipped", {})),
            mode=input.mode,
            applied_now=outcome.applied_now,
        )

    @activity.defn
    def demote_warm(self, input: DemoteWarmInput) -> DemoteWarmResult:
        """Compensation of promote_warm."""
        s = self.s
        if not input.pods:
            return DemoteWarmResult(pods=[], applied_now=False)

        def apply(op_id: str) -> dict[str, Any]:
            demoted = []
            for name in input.pods:
                current = self._try_read_pod(input.namespace, name)
                if current is None or s.router_label not in _labels(current):
                    continue
                notes: dict[str, Any] = {s.op_annotation: op_id}
                if input.mode == "weight":
                    notes[s.router_weight_annotation] = None
                self._patch_pod(
                    input.namespace,
                    name,
                    {"metadata": {"labels": {s.router_label: None}, "annotations": notes}},
                )
                demoted.append(name)
            return {"demoted": demoted}

        def confirm(_op_id: str) -> dict[str, Any] | None:
            still = [
                name
                for name in input.pods
                if (pod := self._try_read_pod(input.namespace, name)) is not None
                and s.router_label in _labels(pod)
            ]
            return None if still else {"unrouted": list(input.pods)}

        outcome = run_effect(
            self.runner,
            input,
            kind="demote-warm",
            target=f"{input.namespace}/pod/{input.pods[0]}",
            intent={"pods": input.pods, "mode": input.mode},
            apply=apply,
            confirm=confirm,
        )
        return DemoteWarmResult(pods=input.pods, applied_now=outcome.applied_now)

    @activity.defn
    def find_warm_workload(self, input: WarmWorkloadInput) -> WarmWorkloadResult:
        """The Deployment or LeaderWorkerSet whose selector owns the (promoted) warm spares."""
        pods = [
            self._call(
                "get",
                f"pod {input.namespace}/{name}",
                self.core.read_namespaced_pod,
                name,
                input.namespace,
            )
            for name in input.pods
        ]
        if not pods:
            return WarmWorkloadResult(reason="no warm spare named")
        for kind, name, selector, obj in self._controllers(input.namespace):
            if kind not in ("Deployment", "LeaderWorkerSet"):
                continue
            if all(selector_matches(selector, _labels(p)) for p in pods):
                replicas = (
                    int(obj.spec.replicas or 0)
                    if kind == "Deployment"
                    else int((obj.get("spec") or {}).get("replicas") or 0)
                )
                return WarmWorkloadResult(kind=kind, name=name, replicas=replicas)  # type: ignore[arg-type]
        return WarmWorkloadResult(
            reason=f"no Deployment or LeaderWorkerSet selects {', '.join(input.pods)}"
        )

    @activity.defn
    def scale_pool(self, input: ScaleInput) -> ScaleResult:
        """Set the workload's replicas through its scale subresource."""
        s = self.s
        obj = f"{input.kind.lower()} {input.namespace}/{input.name}"

        def read_replicas() -> tuple[int, dict[str, str]]:
            if input.kind == "Deployment":
                scale = self._call(
                    "get",
                    f"{obj}/scale",
                    self.apps.read_namespaced_deployment_scale,
                    input.name,
                    input.namespace,
                )
                d = self._call(
                    "get", obj, self.apps.read_namespaced_deployment, input.name, input.namespace
                )
                return int(scale.spec.replicas or 0), _annotations(d)
            lws = self._call(
                "get",
                obj,
                self.custom.get_namespaced_custom_object,
                LWS_GROUP,
                LWS_VERSION,
                input.namespace,
                LWS_PLURAL,
                input.name,
            )
            return int(lws["spec"].get("replicas") or 0), dict(
                lws["metadata"].get("annotations") or {}
            )

        previous_key = "fleetmend.io/previous-replicas"

        def recorded_previous(op_id: str, notes: dict[str, str], current: int) -> int | None:
            # The size before this operation, stamped beside its op id by its first write.
            if notes.get(s.op_annotation) != op_id:
                return None
            return int(notes.get(previous_key, current))

        def apply(op_id: str) -> dict[str, Any]:
            current, notes = read_replicas()
            previous = recorded_previous(op_id, notes, current)
            if previous is not None and current == input.replicas:
                return {"previous": previous, "replicas": current}
            stamp = {
                "metadata": {"annotations": {s.op_annotation: op_id, previous_key: str(current)}}
            }
            body = {"spec": {"replicas": input.replicas}}
            # An attempt that died between the stamp and the scale left the stamp: one write
            # per object per operation, and the size it recorded is the one to undo to.
            stamped = previous is not None
            if input.kind == "Deployment":
                if not stamped:
                    self._call(
                        "patch",
                        obj,
                        self.apps.patch_namespaced_deployment,
                        input.name,
                        input.namespace,
                        stamp,
                    )
                self._call(
                    "patch",
                    f"{obj}/scale",
                    self.apps.patch_namespaced_deployment_scale,
                    input.name,
                    input.namespace,
                    body,
                )
            else:
                if not stamped:
                    self._call(
                        "patch",
                        obj,
                        self.custom.patch_namespaced_custom_object,
                        LWS_GROUP,
                        LWS_VERSION,
                        input.namespace,
                        LWS_PLURAL,
                        input.name,
                        stamp,
                    )
                self._call(
                    "patch",
                    f"{obj}/scale",
                    self.custom.patch_namespaced_custom_object_scale,
                    LWS_GROUP,
                    LWS_VERSION,
                    input.namespace,
                    LWS_PLURAL,
                    input.name,
                    body,
                )
            return {
                "previous": current if previous is None else previous,
                "replicas": input.replicas,
            }

        def confirm(op_id: str) -> dict[str, Any] | None:
            current, notes = read_replicas()
            if current != input.replicas:
                return None
            previous = recorded_previous(op_id, notes, current)
            return {"replicas": current} | ({} if previous is None else {"previous": previous})

        kind = "deployment" if input.kind == "Deployment" else "leaderworkerset"
        outcome = run_effect(
            self.runner,
            input,
            kind="scale",
            target=f"{input.namespace}/{kind}/{input.name}",
            intent={"replicas": input.replicas},
            apply=apply,
            confirm=confirm,
        )
        previous = outcome.result.get("previous")
        if previous is None:
            previous = read_replicas()[0]
        return ScaleResult(
            kind=input.kind,
            name=input.name,
            previous_replicas=int(previous),
            replicas=input.replicas,
            applied_now=outcome.applied_now,
        )

    @activity.defn
    def estimate_lead_time(self, input: LeadTimeInput) -> LeadTimeResult:
        """Seconds from pod creation to Ready, from past startups, else the default."""
        pods = self._list_pods(input.namespace, f"{self.s.pool_label}={input.pool}")
        samples = sorted(x for x in (startup_seconds(p) for p in pods) if x is not None)
        default = self.s.default_lead_time_s if input.default_s is None else input.default_s
        seconds, source = lead_time_from_samples(samples, default)
        return LeadTimeResult(seconds=seconds, source=source, samples=samples)

    @activity.defn
    def diagnose_pending(self, input: PendingInput) -> PendingResult:
        """Pending pods' events, and fragmentation told apart from shortage."""
        s = self.s
        pods = self._list_pods(input.namespace, f"{s.pool_label}={input.pool}")
        pending_pods = [p for p in pods if p.status and p.status.phase == "Pending"]
        events = self._call(
            "list", f"events {input.namespace}", self.core.list_namespaced_event, input.namespace
        )
        by_pod: dict[str, list[Any]] = {}
        for ev in events.items or []:
            ref = ev.involved_object
            if ref is not None and ref.kind == "Pod" and ref.name:
                by_pod.setdefault(ref.name, []).append(ev)
        pending: list[PendingPod] = []
        for p in pending_pods:
            evs = sorted(
                by_pod.get(p.metadata.name, []),
                key=lambda e: str(
                    e.last_timestamp or e.event_time or e.metadata.creation_timestamp
                ),
            )
            pending.append(
                PendingPod(
                    pod=p.metadata.name,
                    gpus_requested=pod_gpus(p, s.gpu_resource),
                    reasons=[e.reason for e in evs if e.reason],
                    messages=[e.message for e in evs if e.message],
                )
            )
        free = self._free_gpus()
        diagnosis, explanation, largest = diagnose_scheduling(pending, free, s.gpu_resource)
        return PendingResult(
            diagnosis=diagnosis,  # type: ignore[arg-type]
            explanation=explanation,
            pending=pending,
            free_gpus_total=sum(free.values()),
            free_gpus_by_node=free,
            largest_free_block=largest,
        )

    def _free_gpus(self) -> dict[str, int]:
        """Allocatable minus what running pods request, on nodes a replacement may use."""
        s = self.s
        nodes = self._nodes()
        pods = self._call("list", "pods (all namespaces)", self.core.list_pod_for_all_namespaces)
        used: dict[str, int] = {}
        for p in pods.items or []:
            node = p.spec.node_name if p.spec else None
            phase = p.status.phase if p.status else None
            if node and phase not in ("Succeeded", "Failed"):
                used[node] = used.get(node, 0) + pod_gpus(p, s.gpu_resource)
        free: dict[str, int] = {}
        for name, node in nodes.items():
            if not node_ready(node) or (node.spec and node.spec.unschedulable):
                continue
            if _labels(node).get(s.qualified_label) == "false":
                continue
            allocatable = (node.status.allocatable or {}) if node.status else {}
            capacity = _gpu_quantity(allocatable.get(s.gpu_resource, 0))
            if capacity <= 0:
                continue
            free[name] = max(0, capacity - used.get(name, 0))
        return free

    # ------------------------------------------------------------------ nodes

    def _read_node(self, name: str) -> Any:
        return self._call("get", f"node {name}", self.core.read_node, name)

    def _patch_node(self, name: str, body: dict[str, Any]) -> Any:
        return self._call("patch", f"node {name}", self.core.patch_node, name, body)

    def cordon(
        self,
        op: MutatingInput,
        op_id: str,
        node: str,
        reason: str,
        mark_unqualified: bool,
        *,
        compensates: str | None = None,
    ) -> CordonResult:
        """Cordon and label the node unqualified until it passes qualification.

        Part of triage and of relocation, not an activity of its own: no step of the
        runbook cordons a node without triaging it first.
        """
        s = self.s

        def apply(applied: str) -> dict[str, Any]:
            current = self._read_node(node)
            labels, notes = _labels(current), _annotations(current)
            was = bool(current.spec.unschedulable) if current.spec else False
            if notes.get(s.op_annotation) == applied and was:
                return {"was_unschedulable": notes.get(WAS_UNSCHEDULABLE) == "true"}
            body: dict[str, Any] = {
                "spec": {"unschedulable": True},
                "metadata": {
                    "annotations": {
                        s.op_annotation: applied,
                        "fleetmend.io/cordon-reason": reason[:250],
                        WAS_UNSCHEDULABLE: "true" if was else "false",
                    }
                },
            }
            if mark_unqualified and labels.get(s.qualified_label) != "false":
                body["metadata"]["labels"] = {s.qualified_label: "false"}
            self._patch_node(node, body)
            return {"was_unschedulable": was}

        def confirm(applied: str) -> dict[str, Any] | None:
            current = self._read_node(node)
            ok = bool(current.spec.unschedulable) and (
                not mark_unqualified or _labels(current).get(s.qualified_label) == "false"
            )
            return {"unschedulable": True} if ok else None

        outcome = run_effect(
            self.runner,
            op,
            kind="cordon-node",
            target=f"node/{node}",
            intent={"unschedulable": True, "qualified": "false" if mark_unqualified else None},
            apply=apply,
            confirm=confirm,
            compensates=compensates,
            op_id=op_id,
        )
        current = self._read_node(node)
        return CordonResult(
            node=node,
            unschedulable=bool(current.spec.unschedulable) if current.spec else False,
            qualified_label=_labels(current).get(s.qualified_label),
            applied_now=outcome.applied_now,
        )

    def uncordon(
        self, op: MutatingInput, op_id: str, node: str, keep_unqualified: bool = True
    ) -> UncordonResult:
        """Make the node schedulable again; the last step of relocation, not an activity.

        `keep_unqualified` leaves it labelled unqualified: back to scheduling, not to
        serving. Triage's cordon has no undo: a faulty node stays out until qualified.
        """
        s = self.s

        def uncordoned_by(applied: str) -> bool:
            # The stamp tells this operation's own write (a dead attempt's) from anyone's.
            current = self._read_node(node)
            schedulable = not (current.spec and current.spec.unschedulable)
            return schedulable and _annotations(current).get(s.op_annotation) == applied

        def apply(applied: str) -> dict[str, Any]:
            if uncordoned_by(applied):
                return {"unschedulable": False}
            body: dict[str, Any] = {
                "spec": {"unschedulable": False},
                "metadata": {"annotations": {s.op_annotation: applied}},
            }
            if not keep_unqualified:
                body["metadata"]["labels"] = {s.qualified_label: None}
            self._patch_node(node, body)
            return {"unschedulable": False}

        def confirm(applied: str) -> dict[str, Any] | None:
            return {"unschedulable": False} if uncordoned_by(applied) else None

        outcome = run_effect(
            self.runner,
            op,
            kind="uncordon-node",
            target=f"node/{node}",
            intent={"unschedulable": False, "keep_unqualified": keep_unqualified},
            apply=apply,
            confirm=confirm,
            op_id=op_id,
        )
        current = self._read_node(node)
        return UncordonResult(
            node=node,
            unschedulable=bool(current.spec.unschedulable) if current.spec else False,
            applied_now=outcome.applied_now,
        )

    @activity.defn
    def relocate_misplaced_pod(self, input: RelocateInput) -> RelocateResult:
        """Cordon the wrong node, delete the pod, wait for it to land elsewhere, uncordon."""
        s = self.s
        progress = activity.info().heartbeat_details if activity.in_activity() else ()
        pod = self._try_read_pod(input.namespace, input.pod)
        done = dict(progress[0]) if progress and isinstance(progress[0], dict) else {}
        wrong = done.get("wrong_node") or (
            pod.spec.node_name if pod is not None and pod.spec else None
        )
        if not wrong:
            raise PermanentError(
                f"relocate pod {input.namespace}/{input.pod}: not found or not scheduled, "
                "nothing to relocate"
            )
        steps: list[str] = list(done.get("steps", []))
        owner = done.get("owner") or self._owner_uid(pod)
        was_cordoned = done.get("was_cordoned")
        if was_cordoned is None:
            was_cordoned = self._cordoned_before(wrong, f"{input.op_id}/cordon")
        state = {"wrong_node": wrong, "owner": owner, "steps": steps, "was_cordoned": was_cordoned}

        # Stop it landing there again BEFORE deleting, or the controller recreates it in place.
        cordon = self.cordon(
            input, f"{input.op_id}/cordon", wrong, f"misplaced {input.pod}", mark_unqualified=False
        )
        if "cordon" not in steps:
            steps.append("cordon")
        heartbeat(state)

        def apply_delete(op_id: str) -> dict[str, Any]:
            current = self._try_read_pod(input.namespace, input.pod)
            if current is None or (current.spec and current.spec.node_name != wrong):
                return {"deleted": False, "reason": "no longer on the wrong node"}
            if current.metadata.deletion_timestamp is not None:
                # A dead attempt's delete: the pod is leaving, asking again writes twice.
                return {"deleted": True, "reason": "already terminating"}
            self._patch_pod(
                input.namespace, input.pod, {"metadata": {"annotations": {s.op_annotation: op_id}}}
            )
            self._call(
                "delete",
                f"pod {input.namespace}/{input.pod}",
                self.core.delete_namespaced_pod,
                input.pod,
                input.namespace,
            )
            return {"deleted": True}

        deleted = run_effect(
            self.runner,
            input,
            kind="delete-pod",
            target=f"{input.namespace}/pod/{input.pod}",
            intent={"reason": "wrong pool", "node": wrong},
            apply=apply_delete,
            op_id=f"{input.op_id}/delete",
        )
        if "delete" not in steps:
            steps.append("delete")
        heartbeat(state)

        replacement, replacement_node = None, None
        deadline = time.monotonic() + input.wait_rescheduled_s
        while not input.dry_run:
            replacement, replacement_node = self._replacement(
                input.namespace, owner, input.pod, wrong
            )
            if replacement_node is not None:
                break
            if time.monotonic() >= deadline:
                raise TemporaryError(
                    f"relocate pod {input.namespace}/{input.pod}: no replacement scheduled "
                    f"off node {wrong} within {input.wait_rescheduled_s:.0f}s"
                )
            wait(s.poll_interval_s, state)
        if "rescheduled" not in steps:
            steps.append("rescheduled")
        if not was_cordoned:
            self.uncordon(input, f"{input.op_id}/uncordon", wrong, keep_unqualified=True)
            if "uncordon" not in steps:
                steps.append("uncordon")
        return RelocateResult(
            pod=input.pod,
            wrong_node=wrong,
            replacement=replacement,
            replacement_node=replacement_node,
            steps=steps,
            applied_now=cordon.applied_now or deleted.applied_now,
        )

    def _cordoned_before(self, name: str, cordon_op_id: str) -> bool:
        """Whether the node was unschedulable before `cordon_op_id` cordoned it.

        A retry whose worker died in that cordon has no heartbeat to say so: the node it
        finds cordoned under its own stamp was cordoned by the dead attempt, which noted on
        the node what it found.
        """
        node = self._read_node(name)
        notes = _annotations(node)
        if notes.get(self.s.op_annotation) == cordon_op_id:
            return notes.get(WAS_UNSCHEDULABLE) == "true"
        return bool(node.spec.unschedulable) if node.spec else False

    def _owner_uid(self, pod: Any) -> str | None:
        for ref in (pod.metadata.owner_references if pod is not None else None) or []:
            if ref.controller:
                return str(ref.uid)
        return None

    def _replacement(
        self, namespace: str, owner: str | None, old: str, wrong: str
    ) -> tuple[str | None, str | None]:
        """The pod that replaced `old`, once it is scheduled off the wrong node.

        A ReplicaSet replaces under a new name with the same owner; a LeaderWorkerSet or
        StatefulSet recreates under the same name.
        """
        pods = self._call("list", f"pods {namespace}", self.core.list_namespaced_pod, namespace)
        for p in pods.items or []:
            if p.metadata.deletion_timestamp is not None:
                continue
            same_owner = owner is not None and self._owner_uid(p) == owner
            if not (same_owner or p.metadata.name == old):
                continue
            node = p.spec.node_name if p.spec else None
            if node and node != wrong:
                return p.metadata.name, node
        return None, None

    @activity.defn
    def find_replacements(self, input: ReplacementsInput) -> ReplacementsResult:
        """The pool's serving pods its controller started in place of lost ones (any not in
        `known`), one per replica (a group by its leader), and whether each is Ready."""
        s = self.s
        pods = [
            p
            for p in self._list_pods(input.namespace, f"{s.pool_label}={input.pool}")
            if not self._is_warm(p)
            and p.metadata.deletion_timestamp is None
            and (p.status.phase if p.status else None) not in ("Failed", "Succeeded")
        ]
        known = set(input.known)
        return ReplacementsResult(
            replacements=[
                Replacement(
                    pod=self._ref(leader),
                    ready=all(pod_ready(m) for m in members),
                    stuck=next(
                        (
                            reason
                            for m in members
                            for reason in self._pod_facts(m, lost=False).waiting_reasons
                            if reason in STUCK_REASONS
                        ),
                        None,
                    ),
                )
                for leader, members in self._replicas(pods)
                if leader.metadata.name not in known
            ]
        )

    # ------------------------------------------------------------------ verify

    @activity.defn
    def verify_capacity(self, input: VerifyCapacityInput) -> VerifyCapacityResult:
        """Ready replicas, ready endpoints, warm floor, failed nodes cordoned: with evidence."""
        s = self.s
        checks: list[Check] = []
        kind, name, _, _ = self._workload(input.namespace, input.pool)
        ready = total = 0
        preference: NodePoolPreference | None = None
        if kind == "Deployment":
            d = self._call(
                "get",
                f"deployment {input.namespace}/{name}",
                self.apps.read_namespaced_deployment,
                name,
                input.namespace,
            )
            ready = int((d.status.ready_replicas if d.status else 0) or 0)
            total = int((d.status.replicas if d.status else 0) or 0)
            template = d.spec.template.spec if d.spec and d.spec.template else None
            preference = preferred_node_pool(
                getattr(template, "affinity", None), s.node_pool_labels
            )
        elif kind == "LeaderWorkerSet":
            lws = self._call(
                "get",
                f"leaderworkerset {input.namespace}/{input.pool}",
                self.custom.get_namespaced_custom_object,
                LWS_GROUP,
                LWS_VERSION,
                input.namespace,
                LWS_PLURAL,
                input.pool,
            )
            ready = int((lws.get("status") or {}).get("readyReplicas") or 0)
            total = int((lws.get("status") or {}).get("replicas") or 0)
        checks.append(
            Check(
                name="workload-ready-replicas",
                passed=kind is not None and ready >= input.target_replicas,
                evidence={
                    "workload": f"{kind}/{name}",
                    "ready_replicas": ready,
                    "replicas": total,
                    "target": input.target_replicas,
                },
            )
        )
        endpoints = self._endpoint_states(input.namespace, input.service)
        ready_eps = [e for e in endpoints if e.ready is not False and not e.terminating]
        target_eps = input.target_endpoints or input.target_replicas
        checks.append(
            Check(
                name="endpointslice-ready-endpoints",
                passed=len(ready_eps) >= target_eps,
                evidence={
                    "ready": len(ready_eps),
                    "not_ready": len(endpoints) - len(ready_eps),
                    "target": target_eps,
                    "ready_pods": sorted(e.pod or e.address for e in ready_eps),
                },
            )
        )
        nodes = self._nodes()
        serving = [
            p
            for p in self._list_pods(input.namespace, f"{s.pool_label}={input.pool}")
            if not self._is_warm(p)
        ]
        model, revision = input.model, input.revision
        if model is None or revision is None:
            m, r = self._model_of(serving)
            model, revision = model or m, revision or r
        warm = self._warm_floor(input.namespace, input.pool, model, revision, nodes)
        checks.append(
            Check(
                name="warm-floor-restored",
                passed=warm.count >= input.warm_floor_target,
                evidence={
                    "warm_ready": warm.count,
                    "target": input.warm_floor_target,
                    "pods": [r.name for r in warm.ready],
                    "excluded": warm.excluded,
                    "model": model,
                    "revision": revision,
                },
            )
        )
        replacements = [
            p
            for p in serving
            if input.present_before is None or p.metadata.name not in input.present_before
        ]
        checks.append(self._placement_check(replacements, nodes, preference))
        node_evidence: dict[str, dict[str, Any]] = {}
        for n in input.failed_nodes:
            node = nodes.get(n)
            node_evidence[n] = {
                "exists": node is not None,
                "unschedulable": bool(node.spec.unschedulable) if node and node.spec else None,
                "qualified": _labels(node).get(s.qualified_label) if node else None,
            }
        checks.append(
            Check(
                name="failed-nodes-cordoned",
                passed=all(
                    (not e["exists"]) or (e["unschedulable"] and e["qualified"] == "false")
                    for e in node_evidence.values()
                ),
                evidence={"nodes": node_evidence},
            )
        )
        # A replica on the wrong pool still serves: it is moved in the roll-back, and does
        # not hold the verification back.
        return VerifyCapacityResult(
            passed=all(c.passed for c in checks if c.name != PLACEMENT_CHECK), checks=checks
        )

    def _placement_check(
        self, pods: list[Any], nodes: dict[str, Any], preference: NodePoolPreference | None
    ) -> Check:
        if preference is None:
            return Check(
                name=PLACEMENT_CHECK,
                passed=True,
                evidence={"misplaced": []},
                detail="the workload prefers no node pool",
            )
        misplaced = misplaced_pods(
            {
                p.metadata.name: p.spec.node_name if p.spec else None
                for p in pods
                if p.metadata.deletion_timestamp is None
            },
            {name: _labels(node) for name, node in nodes.items()},
            preference,
        )
        return Check(
            name=PLACEMENT_CHECK,
            passed=not misplaced,
            evidence={
                "preferred": {preference.label: sorted(preference.values)},
                "misplaced": sorted(misplaced),
                "pool_of_misplaced": misplaced,
            },
        )
