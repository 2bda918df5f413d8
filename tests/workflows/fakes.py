"""An in-memory fleet and fake activities registered under the real activity names.

Used by the workflow tests on the time-skipping server. The fake ledger keeps one result
per operation id, so a retried or repeated operation is answered from it and never applied
twice; the fleet counts every effect it actually applied, so a test can assert
"exactly once" and "back as it was" from the fleet's side, not the ledger's.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.cluster import (
    PLACEMENT_CHECK,
    AssessInput,
    AssessResult,
    CommonCause,
    CommonCauseFinding,
    DemoteWarmInput,
    DemoteWarmResult,
    DerouteInput,
    DerouteResult,
    EndpointState,
    FailureDomains,
    ForceDeleteInput,
    ForceDeleteResult,
    LeadTimeInput,
    LeadTimeResult,
    PendingInput,
    PendingResult,
    PromoteWarmInput,
    PromoteWarmResult,
    RelocateInput,
    RelocateResult,
    Replacement,
    ReplacementsInput,
    ReplacementsResult,
    RoutingStateInput,
    RoutingStateResult,
    ScaleInput,
    ScaleResult,
    VerifyCapacityInput,
    VerifyCapacityResult,
    WarmFloor,
    WarmWorkloadInput,
    WarmWorkloadResult,
)
from activities.common import Check, PodRef
from activities.errors import TemporaryError
from activities.gateway import (
    RestoreShedTierInput,
    RestoreShedTierResult,
    RetryContractInput,
    RetryContractResult,
    RouterWeightsInput,
    RouterWeightsResult,
    ShedTierInput,
    ShedTierResult,
    TierDecision,
    TierSpec,
)
from activities.metrics import (
    PressureInput,
    PressureResult,
    RatesInput,
    RatesResult,
    ReplicaPressure,
    ReplicaRate,
    VerifyServingInput,
    VerifyServingResult,
)
from activities.notify import NotifyInput, NotifyResult
from activities.ramp import RampInput, RampResult
from activities.triage import TriageInput, TriageResult
from activities.warmup import WarmupInput, WarmupResult
from workflows.types import (
    FindingsInput,
    LedgerOperation,
    LedgerOperations,
    LedgerQuery,
    ObservedEffect,
    ObservedEffects,
    ObserveInput,
)

MODEL = "llama-3-70b"
REVISION = "r7"


@dataclass
class Pod:
    node: str
    routed: bool = True
    # Serving replicas carry an explicit router weight; warm spares have none until promoted.
    weight: int | None = 125
    warm: bool = False
    rate: float = 20.0


@dataclass
class Node:
    cordoned: bool = False
    qualified: bool = True


@dataclass
class Fleet:
    """One pool: serving replicas, warm spares, nodes, the gateway tier and the workload."""

    namespace: str
    pool: str
    pods: dict[str, Pod] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    shed_tier: int = 0
    shed_tier_writes: list[int] = field(default_factory=list)  # every level written, in order
    replicas: int = 0
    warm_replicas: int = 0
    dead: set[str] = field(default_factory=set)
    # What the survivors' pressure asks for (a D-level of the degradation ladder).
    wanted_tier: int = 2
    deroute_confirms: bool = True
    verify_passes: bool = True
    # Attempts of ramp_traffic that fail as an infrastructure fault would, before one works.
    ramp_faults: int = 0
    # Pods verify_capacity names as placed off their workload's preferred node pool.
    misplaced: list[str] = field(default_factory=list)
    # Pods the pool's controller started in place of lost ones: name -> Ready.
    replacements: dict[str, bool] = field(default_factory=dict)
    # Replacements still loading weights: name -> polls they answer not Ready before Ready.
    loading_polls: dict[str, int] = field(default_factory=dict)
    # Replacements that cannot start by waiting: name -> waiting reason.
    stuck: dict[str, str] = field(default_factory=dict)
    # What the assessment finds behind the losses (`rollout`, `image-pull`, ...).
    common_causes: list[CommonCause] = field(default_factory=list)
    # Per pod, TTFT p99 of successive probes; a pod absent answers 0.4 s.
    probe_ttft: dict[str, list[float]] = field(default_factory=dict)
    # Per pod, the service rate its warm-up measures; a pod absent serves its `rate`.
    warm_up_rates: dict[str, float] = field(default_factory=dict)
    fail: Callable[[str, BaseModel], bool] = lambda name, request: False
    # Activities that decline on purpose (RefusedError), e.g. triage of a node that serves.
    refuse: Callable[[str, BaseModel], bool] = lambda name, request: False
    # Observability of the fake itself.
    applied: Counter[str] = field(default_factory=Counter)
    calls: list[tuple[str, str | None]] = field(default_factory=list)
    verify_inputs: list[VerifyCapacityInput] = field(default_factory=list)
    ramp_inputs: list[RampInput] = field(default_factory=list)
    intents: list[tuple[str, str]] = field(default_factory=list)
    ledger: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    findings: list[Any] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        namespace: str,
        pool: str,
        *,
        serving: int = 8,
        warm: int = 1,
        rates: dict[int, float] | None = None,
    ) -> Fleet:
        fleet = cls(namespace=namespace, pool=pool, replicas=serving, warm_replicas=warm)
        for i in range(serving):
            node = f"gpu-{pool}-{i}"
            fleet.nodes[node] = Node()
            fleet.pods[f"{pool}-{i}"] = Pod(node=node, rate=(rates or {}).get(i, 20.0))
        for i in range(warm):
            node = f"gpu-{pool}-warm-{i}"
            fleet.nodes[node] = Node()
            fleet.pods[f"{pool}-warm-{i}"] = Pod(node=node, routed=False, weight=None, warm=True)
        return fleet

    def kill(self, pod: str) -> None:
        """The replica dies; its endpoint is still listed ready (the readiness defect)."""
        self.dead.add(pod)

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(
            {
                "pods": {n: vars(p) for n, p in self.pods.items()},
                "nodes": {n: vars(x) for n, x in self.nodes.items()},
                "shed_tier": self.shed_tier,
                "replicas": self.replicas,
                "warm_replicas": self.warm_replicas,
            }
        )

    # ------------------------------------------------------------ helpers of the fakes

    def _enter(self, name: str, request: BaseModel) -> None:
        self.calls.append((name, getattr(request, "op_id", None)))
        if self.fail(name, request):
            raise ApplicationError(
                f"injected failure in {name}", type="PermanentError", non_retryable=True
            )
        if self.refuse(name, request):
            raise ApplicationError(f"{name} refused", type="RefusedError", non_retryable=True)

    def _effect(self, name: str, request: Any, apply: Callable[[], BaseModel]) -> Any:
        """The ledger's contract: an op id is applied at most once; dry run records intent."""
        if request.op_id in self.ledger:
            return self.ledger[request.op_id]
        if request.dry_run:
            self.intents.append((name, request.op_id))
        result = apply()
        if not request.dry_run:
            self.applied[request.op_id] += 1
        self.ledger[request.op_id] = result
        return result

    def pod_ref(self, name: str) -> PodRef:
        return PodRef(namespace=self.namespace, name=name, node=self.pods[name].node, labels={})

    def survivors(self) -> list[str]:
        # A replacement still loading is not serving yet: the assessment does not see it.
        return [
            n
            for n, p in self.pods.items()
            if not p.warm and n not in self.dead and n not in self.replacements
        ]


class FakeActivities:
    """Every activity the incident workflow calls, over one `Fleet`."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def all(self) -> list[Callable[..., Any]]:
        return [
            getattr(self, name)
            for name in dir(self)
            if hasattr(getattr(self, name), "__temporal_activity_definition")
        ]

    # ------------------------------------------------------------ cluster

    @activity.defn(name="assess_loss")
    async def assess_loss(self, input: AssessInput) -> AssessResult:
        f = self.fleet
        f._enter("assess_loss", input)
        lost = sorted({loss.pod for loss in input.losses if loss.pod} | set())
        lost += sorted(
            n
            for n, p in f.pods.items()
            if p.node in {x.node for x in input.losses} and n not in lost
        )
        serving = [n for n, p in f.pods.items() if not p.warm]
        fraction = len(lost) / len(serving)
        warm = [f.pod_ref(n) for n, p in f.pods.items() if p.warm and not p.routed]
        return AssessResult(
            namespace=f.namespace,
            pool=f.pool,
            pool_size=len(serving),
            lost_replicas=lost,
            lost_nodes=sorted({f.pods[p].node for p in lost}),
            lost_fraction=fraction,
            domains=FailureDomains(nodes=sorted({f.pods[p].node for p in lost})),
            largest_domain_loss=1,
            severity="outage" if fraction >= 0.25 else "capacity-event",
            severity_reason=f"{len(lost)} of {len(serving)} replicas",
            survivors=[f.pod_ref(n) for n in f.survivors() if n not in lost],
            warm_floor=WarmFloor(model=MODEL, revision=REVISION, ready=warm),
            workload_kind="Deployment",
            workload_name=f.pool,
            model=MODEL,
            revision=REVISION,
            common_causes=[CommonCauseFinding(cause=c) for c in f.common_causes],
        )

    @activity.defn(name="read_routing_state")
    async def read_routing_state(self, input: RoutingStateInput) -> RoutingStateResult:
        f = self.fleet
        f._enter("read_routing_state", input)
        routed = {p: "listed ready" for p in input.pods if f.pods[p].routed}
        return RoutingStateResult(
            service=input.service,
            publish_not_ready_addresses=False,
            endpoints=[
                EndpointState(
                    pod=p, address="127.0.0.1", ready=True, serving=True, terminating=False
                )
                for p in routed
            ],
            still_routable=routed,
        )

    @activity.defn(name="deroute_replica")
    async def deroute_replica(self, input: DerouteInput) -> DerouteResult:
        f = self.fleet
        f._enter("deroute_replica", input)

        def apply() -> DerouteResult:
            if not input.dry_run:
                f.pods[input.pod].routed = False
            return DerouteResult(
                pods=[input.pod],
                label_removed="serving",
                applied_now=not input.dry_run,
                confirmed=f.deroute_confirms and not input.dry_run,
            )

        return f._effect("deroute_replica", input, apply)

    @activity.defn(name="force_delete_pod")
    async def force_delete_pod(self, input: ForceDeleteInput) -> ForceDeleteResult:
        f = self.fleet
        f._enter("force_delete_pod", input)
        if not input.approved_by:
            raise ApplicationError("no approval", type="RefusedError", non_retryable=True)

        def apply() -> ForceDeleteResult:
            if not input.dry_run:
                del f.pods[input.pod]
            return ForceDeleteResult(
                pod=input.pod, deleted=True, applied_now=True, approved_by=input.approved_by or ""
            )

        return f._effect("force_delete_pod", input, apply)

    @activity.defn(name="promote_warm")
    async def promote_warm(self, input: PromoteWarmInput) -> PromoteWarmResult:
        f = self.fleet
        f._enter("promote_warm", input)
        candidates = [n for n, p in f.pods.items() if p.warm and not p.routed][: input.count]

        def apply() -> PromoteWarmResult:
            if not input.dry_run:
                for n in candidates:
                    f.pods[n].routed = True
                    f.pods[n].weight = input.weight
            return PromoteWarmResult(
                promoted=[f.pod_ref(n) for n in candidates],
                mode=input.mode,
                applied_now=not input.dry_run,
            )

        return f._effect("promote_warm", input, apply)

    @activity.defn(name="demote_warm")
    async def demote_warm(self, input: DemoteWarmInput) -> DemoteWarmResult:
        f = self.fleet
        f._enter("demote_warm", input)

        def apply() -> DemoteWarmResult:
            if not input.dry_run:
                for n in input.pods:
                    if n in f.pods:
                        f.pods[n].routed = False
                        f.pods[n].weight = None
            return DemoteWarmResult(pods=input.pods, applied_now=not input.dry_run)

        return f._effect("demote_warm", input, apply)

    @activity.defn(name="find_warm_workload")
    async def find_warm_workload(self, input: WarmWorkloadInput) -> WarmWorkloadResult:
        f = self.fleet
        f._enter("find_warm_workload", input)
        return WarmWorkloadResult(
            kind="Deployment", name=f"{f.pool}-warm", replicas=f.warm_replicas
        )

    @activity.defn(name="scale_pool")
    async def scale_pool(self, input: ScaleInput) -> ScaleResult:
        f = self.fleet
        f._enter("scale_pool", input)
        warm = input.name.endswith("-warm")
        previous = f.warm_replicas if warm else f.replicas

        def apply() -> ScaleResult:
            if not input.dry_run and warm:
                f.warm_replicas = input.replicas
            elif not input.dry_run:
                f.replicas = input.replicas
            return ScaleResult(
                kind=input.kind,
                name=input.name,
                previous_replicas=previous,
                replicas=input.replicas,
                applied_now=not input.dry_run,
            )

        return f._effect("scale_pool", input, apply)

    @activity.defn(name="estimate_lead_time")
    async def estimate_lead_time(self, input: LeadTimeInput) -> LeadTimeResult:
        self.fleet._enter("estimate_lead_time", input)
        return LeadTimeResult(seconds=840.0, source="observed", samples=[780.0, 840.0])

    @activity.defn(name="diagnose_pending")
    async def diagnose_pending(self, input: PendingInput) -> PendingResult:
        self.fleet._enter("diagnose_pending", input)
        return PendingResult(
            diagnosis="none-pending",
            explanation="nothing pending",
            free_gpus_total=0,
            largest_free_block=0,
        )

    @activity.defn(name="find_replacements")
    async def find_replacements(self, input: ReplacementsInput) -> ReplacementsResult:
        f = self.fleet
        f._enter("find_replacements", input)
        loading = {name for name, polls in f.loading_polls.items() if polls > 0}
        for name in loading:
            f.loading_polls[name] -= 1
        return ReplacementsResult(
            replacements=[
                Replacement(
                    pod=PodRef(namespace=input.namespace, name=name),
                    ready=ready and name not in loading,
                    stuck=self.fleet.stuck.get(name),
                )
                for name, ready in sorted(self.fleet.replacements.items())
                if name not in input.known
            ]
        )

    @activity.defn(name="relocate_misplaced_pod")
    async def relocate_misplaced_pod(self, input: RelocateInput) -> RelocateResult:
        f = self.fleet
        f._enter("relocate_misplaced_pod", input)

        def apply() -> RelocateResult:
            if not input.dry_run and input.pod in f.misplaced:
                f.misplaced.remove(input.pod)
            return RelocateResult(
                pod=input.pod,
                wrong_node="x",
                replacement=None,
                replacement_node=None,
                steps=["cordon", "delete", "uncordon"],
                applied_now=True,
            )

        return f._effect("relocate_misplaced_pod", input, apply)

    @activity.defn(name="verify_capacity")
    async def verify_capacity(self, input: VerifyCapacityInput) -> VerifyCapacityResult:
        f = self.fleet
        f._enter("verify_capacity", input)
        f.verify_inputs.append(input)
        before = set(input.present_before or [])
        misplaced = [p for p in f.misplaced if p not in before]
        return VerifyCapacityResult(
            passed=f.verify_passes,
            checks=[
                Check(
                    name="warm-floor",
                    passed=f.verify_passes,
                    evidence={"target": input.warm_floor_target},
                ),
                Check(
                    name=PLACEMENT_CHECK,
                    passed=not misplaced,
                    evidence={"misplaced": misplaced},
                ),
            ],
        )

    # ------------------------------------------------------------ gateway

    @activity.defn(name="apply_shed_tier")
    async def apply_shed_tier(self, input: ShedTierInput) -> ShedTierResult:
        f = self.fleet
        f._enter("apply_shed_tier", input)
        previous = TierSpec(level=f.shed_tier)
        level = max(min(f.wanted_tier, input.max_level), f.shed_tier)

        def apply() -> ShedTierResult:
            if not input.dry_run:
                f.shed_tier = level
                f.shed_tier_writes.append(level)
            return ShedTierResult(
                decision=TierDecision(
                    level=level,
                    name=f"D{level}",
                    reasons=["waiting per replica above 50"],
                    wanted_level=f.wanted_tier,
                    capped=f.wanted_tier > input.max_level,
                ),
                previous=previous,
                applied=TierSpec(level=level, name=f"D{level}"),
                store_readable=True,
                applied_now=not input.dry_run,
            )

        return f._effect("apply_shed_tier", input, apply)

    @activity.defn(name="restore_shed_tier")
    async def restore_shed_tier(self, input: RestoreShedTierInput) -> RestoreShedTierResult:
        f = self.fleet
        f._enter("restore_shed_tier", input)
        previous = TierSpec(level=f.shed_tier)

        def apply() -> RestoreShedTierResult:
            if not input.dry_run:
                f.shed_tier = input.restore_to.level
                f.shed_tier_writes.append(input.restore_to.level)
            return RestoreShedTierResult(
                previous=previous, applied=input.restore_to, applied_now=True
            )

        return f._effect("restore_shed_tier", input, apply)

    @activity.defn(name="apply_retry_contract")
    async def apply_retry_contract(self, input: RetryContractInput) -> RetryContractResult:
        f = self.fleet
        f._enter("apply_retry_contract", input)
        return f._effect(
            "apply_retry_contract",
            input,
            lambda: RetryContractResult(
                policy="retry-before-first-byte",
                per_replica={},
                total_retried=3,
                total_terminated=1,
                applied_now=not input.dry_run,
            ),
        )

    @activity.defn(name="set_router_weights")
    async def set_router_weights(self, input: RouterWeightsInput) -> RouterWeightsResult:
        f = self.fleet
        f._enter("set_router_weights", input)
        previous = {p: f.pods[p].weight for p in input.weights if p in f.pods}

        def apply() -> RouterWeightsResult:
            if not input.dry_run:
                for p, w in input.weights.items():
                    f.pods[p].weight = w
            return RouterWeightsResult(previous=previous, applied=input.weights, applied_now=True)

        return f._effect("set_router_weights", input, apply)

    # ------------------------------------------------------------ metrics, ramp, triage, notify

    @activity.defn(name="read_pressure")
    async def read_pressure(self, input: PressureInput) -> PressureResult:
        self.fleet._enter("read_pressure", input)
        return PressureResult(
            replicas=[
                ReplicaPressure(pod=t.name, waiting=60.0, running=32.0) for t in input.targets
            ],
            total_waiting=60.0 * len(input.targets),
            total_running=32.0 * len(input.targets),
            max_kv_cache_usage=0.97,
            total_preemption_rate=0.5,
        )

    @activity.defn(name="read_replica_rates")
    async def read_replica_rates(self, input: RatesInput) -> RatesResult:
        f = self.fleet
        f._enter("read_replica_rates", input)
        replicas = []
        for t in input.targets:
            # A probe reads its one replica; a read of the pool (sizing a probe share)
            # leaves the replica's probe answers to its probes.
            queue = f.probe_ttft.get(t.name) if len(input.targets) == 1 else None
            ttft = queue.pop(0) if queue else 0.4
            replicas.append(
                ReplicaRate(pod=t.name, requests_per_s=f.pods[t.name].rate, ttft_p99_s=ttft)
            )
        return RatesResult(replicas=replicas, interval_s=input.interval_s)

    @activity.defn(name="verify_serving")
    async def verify_serving(self, input: VerifyServingInput) -> VerifyServingResult:
        self.fleet._enter("verify_serving", input)
        return VerifyServingResult(passed=True, checks=[Check(name="ttft-per-pod", passed=True)])

    @activity.defn(name="ramp_traffic")
    async def ramp_traffic(self, input: RampInput) -> RampResult:
        f = self.fleet
        f._enter("ramp_traffic", input)
        f.ramp_inputs.append(input)
        if f.ramp_faults > 0:
            f.ramp_faults -= 1
            raise TemporaryError("ledger database restarting: connection refused")
        pods = [r.name for r in [*input.warm_replicas, *input.new_replicas]]
        previous = {p: f.pods[p].weight for p in pods}

        def apply() -> RampResult:
            final = {p: 250 for p in pods}
            if not input.dry_run:
                for p, w in final.items():
                    f.pods[p].weight = w
            return RampResult(
                completed=True,
                steps=[],
                final_weights=final,
                previous_weights=previous,
                keep_shedding=False,
                applied_now=True,
            )

        return f._effect("ramp_traffic", input, apply)

    @activity.defn(name="triage_node")
    async def triage_node(self, input: TriageInput) -> TriageResult:
        f = self.fleet
        f._enter("triage_node", input)

        def apply() -> TriageResult:
            if not input.dry_run:
                f.nodes[input.node].cordoned = True
                f.nodes[input.node].qualified = False
            return TriageResult(
                node=input.node,
                faults=[],
                disposition="reboot-node",
                runbook="gpu-fault",
                reason="Xid 79",
                per_fault=[],
                cordoned=True,
                qualified_label="false",
                applied_now=not input.dry_run,
            )

        return f._effect("triage_node", input, apply)

    @activity.defn(name="warm_up_replica")
    async def warm_up_replica(self, input: WarmupInput) -> WarmupResult:
        f = self.fleet
        f._enter("warm_up_replica", input)
        pod = input.replica.name
        return WarmupResult(
            pod=pod,
            passed=True,
            reason="TTFT dropped",
            ttft_before_s=1.9,
            ttft_after_s=0.4,
            requests_sent=12,
            failures=0,
            served_per_s=f.warm_up_rates.get(pod, f.pods[pod].rate),
        )

    @activity.defn(name="notify_incident_channel")
    async def notify_incident_channel(self, input: NotifyInput) -> NotifyResult:
        f = self.fleet
        f._enter("notify_incident_channel", input)

        def apply() -> NotifyResult:
            if not input.dry_run:
                f.messages.append(input.title)
            return NotifyResult(delivered=True, status_code=200, body={}, applied_now=True)

        return f._effect("notify_incident_channel", input, apply)

    # ------------------------------------------------------------ reconciliation

    @activity.defn(name="read_ledger_operations")
    async def read_ledger_operations(self, input: LedgerQuery) -> LedgerOperations:
        f = self.fleet
        return LedgerOperations(
            operations=[
                LedgerOperation(
                    op_id=op,
                    incident_id=input.incident_id or "",
                    kind="effect",
                    target=f"{f.namespace}/pod/x",
                    state="confirmed",
                )
                for op in f.ledger
            ]
        )

    @activity.defn(name="observe_effects")
    async def observe_effects(self, input: ObserveInput) -> ObservedEffects:
        f = self.fleet
        return ObservedEffects(
            effects=[
                ObservedEffect(op_id=o.op_id, present=True, occurrences=f.applied[o.op_id])
                for o in input.operations
            ]
        )

    @activity.defn(name="store_findings")
    async def store_findings(self, input: FindingsInput) -> None:
        self.fleet.findings.append(input)
