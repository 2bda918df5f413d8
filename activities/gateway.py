"""Gateway activities: admission / shedding tiers, the in-flight retry contract, router weights.

Called from `workflows/replica_loss.py` (protect, in-flight, rollback) and from
`activities/ramp.py` (weights). The gateway is reached through the small `Gateway`
interface; `AnnotationGateway` (the default) keeps the tier, the retry contract and the
per-pod weights as annotations on Kubernetes objects, which the router watches. Another
gateway is another class implementing `Gateway`.

Tier levels follow the degradation ladder (seed 002, section 9.1), mildest first, as
the router reads them from the Service annotation: 0 none, 1 parameter degrade (D2),
2 model fallback (D3), 3 queue with 429 + Retry-After (D4), 4 feature off (D5). D1
(semantic cache) is the application's, not fleetmend's to switch.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

import httpx
from kubernetes import client
from kubernetes.client import ApiClient
from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.common import (
    MUTATING_HEARTBEAT_S,
    NOTHING_TO_UNDO,
    EffectRunnerLike,
    MutatingInput,
    MutatingResult,
    activity_options,
    run_effect,
)
from activities.config import ActivitySettings
from activities.errors import RefusedError, TemporaryError, k8s_call
from activities.metrics import scrape
from activities.redact import redact_url

TIER_NONE = 0
TIER_PARAMETER_DEGRADE = 1
TIER_MODEL_FALLBACK = 2
TIER_QUEUE_429 = 3
TIER_FEATURE_OFF = 4
TIER_NAMES: dict[int, str] = {
    TIER_NONE: "none",
    TIER_PARAMETER_DEGRADE: "parameter-degrade",
    TIER_MODEL_FALLBACK: "model-fallback",
    TIER_QUEUE_429: "queue-429",
    TIER_FEATURE_OFF: "feature-off",
}


class TierSpec(BaseModel):
    """What the gateway enforces at a tier; each level keeps the measures below it."""

    level: int = 0
    name: str = "none"
    max_tokens_factor: float = 1.0
    stream: bool = True
    # Model fallback goes large -> small only; requests longer than the small model's
    # context stay on the large model (the reverse direction is a capability upgrade).
    fallback_from: str | None = None
    fallback_to: str | None = None
    fallback_max_prompt_tokens: int | None = None
    # Where the router sends fallback traffic (a Service of the small model).
    fallback_service: str | None = None
    retry_after_s: int | None = None
    queue_timeout_s: float | None = None
    feature_enabled: bool = True
    op_id: str | None = None


class TierThresholds(BaseModel):
    """Multi-metric triggers (seed 002, section 9.2), per replica."""

    waiting_per_replica: float = 50.0
    kv_cache_usage: float = 0.95
    ttft_p95_s: float = 5.0
    # A loss this large tightens admission before the survivors' numbers move.
    lost_fraction: float = 0.25


class PressureSummary(BaseModel):
    """The numbers the tier choice reads (built by the workflow from read_pressure)."""

    healthy_replicas: int
    waiting_per_replica: float = 0.0
    max_kv_cache_usage: float | None = None
    ttft_p95_s: float | None = None
    preemption_rate: float = 0.0
    thrashing_replicas: int = 0
    lost_fraction: float = 0.0


class TierDecision(BaseModel):
    level: int
    name: str
    reasons: list[str]
    # The pressure asked for more than max_level allows: an approval gate's business.
    wanted_level: int
    capped: bool


class ShedTierInput(MutatingInput):
    namespace: str
    pool: str
    pressure: PressureSummary
    thresholds: TierThresholds = Field(default_factory=TierThresholds)
    max_level: int = TIER_FEATURE_OFF
    # The workflow's durable memory of the last tier it saw, for when the store is down.
    last_known_level: int = 0
    large_model: str | None = None
    small_model: str | None = None
    small_model_context_tokens: int | None = None
    fallback_service: str | None = None
    retry_after_s: int = 10


class ShedTierResult(MutatingResult):
    decision: TierDecision
    previous: TierSpec
    applied: TierSpec
    store_readable: bool
    applied_now: bool


SHED_TIER_OPTIONS = activity_options(
    start_to_close=30, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


class RestoreShedTierInput(MutatingInput):
    """Rollback of the emergency tier, or compensation of apply_shed_tier."""

    namespace: str
    pool: str
    restore_to: TierSpec = Field(default_factory=TierSpec)
    # Evidence that the warm floor is back; the activity refuses without it.
    warm_floor_ready: int
    warm_floor_target: int
    # The apply_shed_tier operation this undoes (the ledger's drift check reads it).
    compensates: str | None = None


class RestoreShedTierResult(MutatingResult):
    previous: TierSpec
    applied: TierSpec
    applied_now: bool


RESTORE_SHED_TIER_OPTIONS = activity_options(
    start_to_close=30, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


class InflightCounts(BaseModel):
    retried: int = 0
    terminated: int = 0


class RetryContractInput(MutatingInput):
    namespace: str
    pool: str
    lost_pods: list[str]


class RetryContractResult(MutatingResult):
    policy: str
    per_replica: dict[str, InflightCounts]
    total_retried: int
    total_terminated: int
    # False when the gateway's counters could not be read (totals are then not known).
    counts_available: bool = True
    counts_error: str | None = None
    applied_now: bool


RETRY_CONTRACT_OPTIONS = activity_options(
    start_to_close=30, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


class RouterWeightsInput(MutatingInput):
    namespace: str
    # Pod name -> weight; a pod absent keeps its weight.
    weights: dict[str, int]


class RouterWeightsResult(MutatingResult):
    previous: dict[str, int | None]
    applied: dict[str, int]
    applied_now: bool


ROUTER_WEIGHTS_OPTIONS = activity_options(
    start_to_close=30, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


def tier_spec(
    level: int,
    *,
    large_model: str | None = None,
    small_model: str | None = None,
    small_model_context_tokens: int | None = None,
    fallback_service: str | None = None,
    retry_after_s: int = 10,
    op_id: str | None = None,
) -> TierSpec:
    """What the gateway enforces at `level`; every level keeps the measures below it."""
    level = max(TIER_NONE, min(TIER_FEATURE_OFF, level))
    spec = TierSpec(level=level, name=TIER_NAMES[level], op_id=op_id)
    if level >= TIER_PARAMETER_DEGRADE:
        spec.max_tokens_factor = 0.5
        spec.stream = False
    if level >= TIER_MODEL_FALLBACK and large_model and small_model:
        spec.fallback_from = large_model
        spec.fallback_to = small_model
        spec.fallback_max_prompt_tokens = small_model_context_tokens
    if level >= TIER_MODEL_FALLBACK:
        spec.fallback_service = fallback_service
    if level >= TIER_QUEUE_429:
        spec.retry_after_s = retry_after_s
        spec.queue_timeout_s = float(retry_after_s * 3)
    if level >= TIER_FEATURE_OFF:
        spec.feature_enabled = False
    return spec


def fallback_target(spec: TierSpec, model: str, prompt_tokens: int) -> str:
    """The model a request goes to under `spec`: large -> small, never long context to small."""
    if spec.fallback_from != model or spec.fallback_to is None:
        return model
    limit = spec.fallback_max_prompt_tokens
    if limit is not None and prompt_tokens > limit:
        return model
    return spec.fallback_to


def choose_tier(
    pressure: PressureSummary,
    *,
    thresholds: TierThresholds | None = None,
    current_level: int = TIER_NONE,
    max_level: int = TIER_FEATURE_OFF,
) -> TierDecision:
    """The shedding tier for the survivors' pressure (pure; table-tested).

    During an incident the tier only tightens: the current level is a floor, and loosening
    is the rollback step's job, once the warm floor is back.
    """
    t = thresholds or TierThresholds()
    wanted = TIER_NONE
    reasons: list[str] = []

    def want(level: int, reason: str) -> None:
        nonlocal wanted
        wanted = max(wanted, level)
        reasons.append(reason)

    if pressure.healthy_replicas <= 0:
        want(TIER_FEATURE_OFF, "no healthy replica left")
    if pressure.thrashing_replicas > 0:
        want(
            TIER_QUEUE_429,
            f"{pressure.thrashing_replicas} replica(s) thrashing (queue up, KV full, preempting)",
        )
    if pressure.max_kv_cache_usage is not None and pressure.max_kv_cache_usage >= t.kv_cache_usage:
        want(
            TIER_MODEL_FALLBACK,
            f"KV cache usage {pressure.max_kv_cache_usage:.2f} >= {t.kv_cache_usage:.2f}",
        )
    if pressure.ttft_p95_s is not None and pressure.ttft_p95_s > t.ttft_p95_s:
        want(TIER_MODEL_FALLBACK, f"TTFT p95 {pressure.ttft_p95_s:.2f}s > {t.ttft_p95_s:.2f}s")
    if pressure.waiting_per_replica > t.waiting_per_replica:
        want(
            TIER_PARAMETER_DEGRADE,
            f"{pressure.waiting_per_replica:.1f} waiting per replica > {t.waiting_per_replica:g}",
        )
    if pressure.lost_fraction >= t.lost_fraction:
        want(
            TIER_PARAMETER_DEGRADE,
            f"lost {pressure.lost_fraction:.0%} of the pool >= {t.lost_fraction:.0%}",
        )
    if current_level > wanted:
        reasons.append(f"keeping tier {current_level} (tiers only tighten during an incident)")
    level = max(wanted, current_level)
    capped = level > max_level and wanted > current_level
    if capped:
        reasons.append(f"capped at {max_level}: tier {wanted} needs approval")
        level = max(max_level, current_level)
    return TierDecision(
        level=level, name=TIER_NAMES[level], reasons=reasons, wanted_level=wanted, capped=capped
    )


class GatewayUnavailable(Exception):
    """The gateway's store could not be read or written."""


class Gateway(Protocol):
    """What fleetmend needs from a gateway; one implementation per product."""

    def read_tier(self, namespace: str, pool: str) -> TierSpec: ...

    def write_tier(self, namespace: str, pool: str, spec: TierSpec) -> None: ...

    def read_retry_policy(self, namespace: str, pool: str) -> str | None: ...

    def write_retry_policy(self, namespace: str, pool: str, policy: str, op_id: str) -> None: ...

    def read_inflight(
        self, namespace: str, pool: str, pods: list[str]
    ) -> dict[str, InflightCounts]: ...

    def read_weights(self, namespace: str, pods: list[str]) -> dict[str, int | None]: ...

    def write_weights(self, namespace: str, weights: dict[str, int | None], op_id: str) -> None: ...

    def read_stamps(self, namespace: str, pods: list[str]) -> dict[str, str | None]: ...


def weights_written_by(
    gateway: Gateway, namespace: str, pods: list[str], op_id: str
) -> dict[str, Any] | None:
    """Confirmation of a ramp step: every pod carries its op id; evidence is what they hold.

    The stamp, not the planned numbers: a step retried after its worker died may hold
    weights from two plans (each pod written once), and that is what was applied.
    """
    if any(stamp != op_id for stamp in gateway.read_stamps(namespace, pods).values()):
        return None
    return {"weights": gateway.read_weights(namespace, pods)}


def weights_visible(
    gateway: Gateway, namespace: str, weights: Mapping[str, int | None], _op_id: str
) -> dict[str, Any] | None:
    """Confirmation of a weight change: the gateway reads back exactly what was written."""
    current = gateway.read_weights(namespace, sorted(weights))
    return {"weights": current} if current == dict(weights) else None


RETRY_BEFORE_FIRST_BYTE = "retry-before-first-byte"


class AnnotationGateway:
    """The default gateway: state in annotations the router watches.

    The tier sits on the pool's Service (`gateway.fleetmend.io/shed-tier`, the level; the
    full spec as JSON beside it), the retry contract on the Service too, and router weights
    on each pod. In-flight outcomes come from the router's own /metrics.
    """

    def __init__(
        self,
        api: ApiClient,
        settings: ActivitySettings | None = None,
        *,
        http: httpx.Client | None = None,
        router_metrics_url: str | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.s = settings or ActivitySettings()
        self.http = http
        self.router_metrics_url = router_metrics_url

    def _service(self, namespace: str, pool: str) -> Any:
        return self.core.read_namespaced_service(
            pool, namespace, _request_timeout=self.s.kubernetes_timeout_s
        )

    def read_tier(self, namespace: str, pool: str) -> TierSpec:
        try:
            svc = self._service(namespace, pool)
        except Exception as exc:
            raise GatewayUnavailable(f"get service {namespace}/{pool}: {exc}") from exc
        notes = (svc.metadata.annotations if svc.metadata else None) or {}
        raw = notes.get(self.s.shed_tier_annotation)
        try:
            level = int(raw) if raw not in (None, "") else TIER_NONE
        except ValueError as exc:
            raise GatewayUnavailable(
                f"service {namespace}/{pool}: tier {raw!r} unreadable"
            ) from exc
        spec_raw = notes.get(self.s.shed_spec_annotation)
        if spec_raw:
            try:
                spec = TierSpec.model_validate_json(spec_raw)
                if spec.level == level:
                    return spec
            except ValueError:
                pass
        return tier_spec(level) if level in TIER_NAMES else TierSpec(level=level, name="unknown")

    def write_tier(self, namespace: str, pool: str, spec: TierSpec) -> None:
        s = self.s
        clear = spec.level == TIER_NONE
        notes: dict[str, Any] = {
            s.shed_tier_annotation: None if clear else str(spec.level),
            s.shed_spec_annotation: None if clear else spec.model_dump_json(),
        }
        if spec.fallback_service:
            notes[s.fallback_service_annotation] = spec.fallback_service
        if spec.op_id:
            notes[s.op_annotation] = spec.op_id
        k8s_call(
            "patch",
            f"service {namespace}/{pool}",
            lambda: self.core.patch_namespaced_service(
                pool,
                namespace,
                {"metadata": {"annotations": notes}},
                _request_timeout=s.kubernetes_timeout_s,
            ),
        )

    def read_retry_policy(self, namespace: str, pool: str) -> str | None:
        svc = k8s_call("get", f"service {namespace}/{pool}", lambda: self._service(namespace, pool))
        notes = (svc.metadata.annotations if svc.metadata else None) or {}
        return notes.get(self.s.retry_policy_annotation)

    def write_retry_policy(self, namespace: str, pool: str, policy: str, op_id: str) -> None:
        s = self.s
        body = {
            "metadata": {"annotations": {s.retry_policy_annotation: policy, s.op_annotation: op_id}}
        }
        k8s_call(
            "patch",
            f"service {namespace}/{pool}",
            lambda: self.core.patch_namespaced_service(
                pool, namespace, body, _request_timeout=s.kubernetes_timeout_s
            ),
        )

    def read_inflight(
        self, namespace: str, pool: str, pods: list[str]
    ) -> dict[str, InflightCounts]:
        if self.http is None or not self.router_metrics_url:
            raise GatewayUnavailable("no router metrics address configured")
        try:
            snap = scrape(self.http, self.router_metrics_url, timeout=self.s.http_timeout_s)
        except ApplicationError as exc:
            where = redact_url(self.router_metrics_url)
            raise GatewayUnavailable(f"router metrics {where}: {exc}") from exc
        out = {pod: InflightCounts() for pod in pods}
        for metric, attr in (
            (self.s.router_retried_metric, "retried"),
            (self.s.router_terminated_metric, "terminated"),
        ):
            stem = metric.removesuffix("_total")
            rows = snap.samples.get(f"{stem}_total") or snap.samples.get(stem) or []
            for labels, value in rows:
                if labels.get("namespace", namespace) != namespace:
                    continue
                pod = labels.get("pod")
                if pod in out:
                    setattr(out[pod], attr, getattr(out[pod], attr) + int(value))
        return out

    def _pod_annotations(self, namespace: str, pods: list[str], key: str) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for name in pods:
            pod = k8s_call(
                "get",
                f"pod {namespace}/{name}",
                lambda name=name: self.core.read_namespaced_pod(  # type: ignore[misc]
                    name, namespace, _request_timeout=self.s.kubernetes_timeout_s
                ),
            )
            out[name] = ((pod.metadata.annotations if pod.metadata else None) or {}).get(key)
        return out

    def read_weights(self, namespace: str, pods: list[str]) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        raw = self._pod_annotations(namespace, pods, self.s.router_weight_annotation)
        for name, value in raw.items():
            try:
                out[name] = None if value is None else round(float(value))
            except ValueError:
                out[name] = None
        return out

    def write_weights(self, namespace: str, weights: dict[str, int | None], op_id: str) -> None:
        s = self.s
        stamps = self.read_stamps(namespace, sorted(weights))
        for name, weight in sorted(weights.items()):
            if stamps[name] == op_id:
                # An earlier attempt of this operation wrote this pod before it died: one
                # write per pod per operation, even if the retry planned another weight.
                continue
            body = {
                "metadata": {
                    "annotations": {
                        s.router_weight_annotation: None if weight is None else str(weight),
                        s.op_annotation: op_id,
                    }
                }
            }
            k8s_call(
                "patch",
                f"pod {namespace}/{name}",
                lambda name=name, body=body: self.core.patch_namespaced_pod(  # type: ignore[misc]
                    name, namespace, body, _request_timeout=s.kubernetes_timeout_s
                ),
            )

    def read_stamps(self, namespace: str, pods: list[str]) -> dict[str, str | None]:
        """The op id of the last change fleetmend made to each pod, if any."""
        return self._pod_annotations(namespace, pods, self.s.op_annotation)


class GatewayActivities:
    """Activities over one `Gateway`, holding it and the ledger runner."""

    def __init__(self, gateway: Gateway, runner: EffectRunnerLike) -> None:
        self.gateway = gateway
        self.runner = runner
        # Last tier seen per pool, for when the store cannot be read (never reset to none).
        self.last_known: dict[tuple[str, str], TierSpec] = {}

    def _current(self, namespace: str, pool: str, floor: int) -> tuple[TierSpec, bool]:
        try:
            spec = self.gateway.read_tier(namespace, pool)
        except GatewayUnavailable:
            known = self.last_known.get((namespace, pool))
            if known is not None and known.level >= floor:
                return known, False
            return tier_spec(floor), False
        self.last_known[(namespace, pool)] = spec
        return spec, True

    @activity.defn
    def apply_shed_tier(self, input: ShedTierInput) -> ShedTierResult:
        """Choose the tier from the survivors' pressure and apply it (never loosening)."""
        current, readable = self._current(input.namespace, input.pool, input.last_known_level)
        if current.op_id == input.op_id:
            # An earlier attempt of this very operation wrote the store and died before the
            # ledger heard of it: what stood before is the level the workflow last knew. The
            # ledger then finds the tier in place and records it without writing again.
            current = tier_spec(input.last_known_level)
        floor = max(current.level, input.last_known_level)
        decision = choose_tier(
            input.pressure,
            thresholds=input.thresholds,
            current_level=floor,
            max_level=input.max_level,
        )
        if decision.level <= current.level:
            # Nothing to tighten. With the store unreadable this keeps the last known tier.
            return ShedTierResult(
                decision=decision,
                previous=current,
                applied=current,
                store_readable=readable,
                applied_now=False,
            )

        def apply(op_id: str) -> dict[str, Any]:
            spec = tier_spec(
                decision.level,
                large_model=input.large_model,
                small_model=input.small_model,
                small_model_context_tokens=input.small_model_context_tokens,
                fallback_service=input.fallback_service,
                retry_after_s=input.retry_after_s,
                op_id=op_id,
            )
            try:
                self.gateway.write_tier(input.namespace, input.pool, spec)
            except GatewayUnavailable as exc:
                raise TemporaryError(
                    f"write shed tier {input.namespace}/{input.pool}: {exc}"
                ) from exc
            self.last_known[(input.namespace, input.pool)] = spec
            return {"applied": spec.model_dump(), "previous": current.model_dump()}

        def confirm(op_id: str) -> dict[str, Any] | None:
            try:
                seen = self.gateway.read_tier(input.namespace, input.pool)
            except GatewayUnavailable:
                return None
            return {"level": seen.level} if seen.level == decision.level else None

        outcome = run_effect(
            self.runner,
            input,
            kind="shed-tier",
            target=f"{input.namespace}/service/{input.pool}",
            intent={
                "pressure": input.pressure.model_dump(),
                "max_level": input.max_level,
                "last_known_level": input.last_known_level,
            },
            apply=apply,
            confirm=confirm,
            emergency=True,
        )
        applied = (
            TierSpec.model_validate(outcome.result["applied"])
            if "applied" in outcome.result
            else tier_spec(decision.level)
        )
        return ShedTierResult(
            decision=decision,
            previous=current,
            applied=applied,
            store_readable=readable,
            applied_now=outcome.applied_now,
        )

    @activity.defn
    def restore_shed_tier(self, input: RestoreShedTierInput) -> RestoreShedTierResult:
        """Put back the earlier tier, only once the warm floor is restored."""
        if input.warm_floor_ready < input.warm_floor_target:
            raise RefusedError(
                f"keeping the shed tier on {input.namespace}/{input.pool}: warm floor "
                f"{input.warm_floor_ready}/{input.warm_floor_target}. Removing it while the "
                "fleet has no spare means the next failure starts from zero."
            )
        try:
            current = self.gateway.read_tier(input.namespace, input.pool)
        except GatewayUnavailable as exc:
            # Unreadable store: keep what is there rather than guess; try again later.
            raise TemporaryError(
                f"restore shed tier {input.namespace}/{input.pool}: store unreadable: {exc}"
            ) from exc

        def apply(op_id: str) -> dict[str, Any]:
            spec = input.restore_to.model_copy(update={"op_id": op_id})
            try:
                self.gateway.write_tier(input.namespace, input.pool, spec)
            except GatewayUnavailable as exc:
                raise TemporaryError(str(exc)) from exc
            self.last_known[(input.namespace, input.pool)] = spec
            return {"applied": spec.model_dump()}

        def confirm(op_id: str) -> dict[str, Any] | None:
            try:
                seen = self.gateway.read_tier(input.namespace, input.pool)
            except GatewayUnavailable:
                return None
            return {"level": seen.level} if seen.level == input.restore_to.level else None

        outcome = run_effect(
            self.runner,
            input,
            kind="restore-shed-tier",
            target=f"{input.namespace}/service/{input.pool}",
            intent={"restore_to": input.restore_to.level},
            apply=apply,
            confirm=confirm,
            compensates=input.compensates,
        )
        if outcome.state == NOTHING_TO_UNDO:
            # The tier it would undo tightened nothing (the pressure did not call for it).
            return RestoreShedTierResult(previous=current, applied=current, applied_now=False)
        applied = (
            TierSpec.model_validate(outcome.result["applied"])
            if "applied" in outcome.result
            else input.restore_to
        )
        return RestoreShedTierResult(
            previous=current, applied=applied, applied_now=outcome.applied_now
        )

    @activity.defn
    def apply_retry_contract(self, input: RetryContractInput) -> RetryContractResult:
        """Retry before the first byte only; count retried and terminated per lost replica."""

        def apply(op_id: str) -> dict[str, Any]:
            if (
                self.gateway.read_retry_policy(input.namespace, input.pool)
                != RETRY_BEFORE_FIRST_BYTE
            ):
                self.gateway.write_retry_policy(
                    input.namespace, input.pool, RETRY_BEFORE_FIRST_BYTE, op_id
                )
            return {"policy": RETRY_BEFORE_FIRST_BYTE}

        def confirm(op_id: str) -> dict[str, Any] | None:
            seen = self.gateway.read_retry_policy(input.namespace, input.pool)
            return {"policy": seen} if seen == RETRY_BEFORE_FIRST_BYTE else None

        outcome = run_effect(
            self.runner,
            input,
            kind="retry-contract",
            target=f"{input.namespace}/service/{input.pool}",
            intent={"policy": RETRY_BEFORE_FIRST_BYTE},
            apply=apply,
            confirm=confirm,
        )
        try:
            counts = self.gateway.read_inflight(input.namespace, input.pool, input.lost_pods)
        except GatewayUnavailable as exc:
            # The contract is in force either way; the counts are reported as unknown.
            return RetryContractResult(
                policy=RETRY_BEFORE_FIRST_BYTE,
                per_replica={},
                total_retried=0,
                total_terminated=0,
                counts_available=False,
                counts_error=str(exc),
                applied_now=outcome.applied_now,
            )
        return RetryContractResult(
            policy=RETRY_BEFORE_FIRST_BYTE,
            per_replica=counts,
            total_retried=sum(c.retried for c in counts.values()),
            total_terminated=sum(c.terminated for c in counts.values()),
            applied_now=outcome.applied_now,
        )

    @activity.defn
    def set_router_weights(self, input: RouterWeightsInput) -> RouterWeightsResult:
        """Set per-pod router weights (ramp steps and their compensation)."""
        previous = self.gateway.read_weights(input.namespace, sorted(input.weights))

        def apply(op_id: str) -> dict[str, Any]:
            self.gateway.write_weights(input.namespace, dict(input.weights), op_id)
            return {"previous": previous, "applied": input.weights}

        outcome = run_effect(
            self.runner,
            input,
            kind="router-weights",
            target=f"{input.namespace}/pod/{sorted(input.weights)[0]}",
            intent={"weights": input.weights},
            apply=apply,
            confirm=functools.partial(
                weights_visible, self.gateway, input.namespace, input.weights
            ),
        )
        recorded = outcome.result.get("previous", previous)
        return RouterWeightsResult(
            previous={k: (None if v is None else int(v)) for k, v in recorded.items()},
            applied=input.weights,
            applied_now=outcome.applied_now,
        )
