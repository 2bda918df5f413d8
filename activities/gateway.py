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

from typing import Protocol

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import MutatingInput, activity_options

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
    retry_after_s: int = 10


class ShedTierResult(BaseModel):
    decision: TierDecision
    previous: TierSpec
    applied: TierSpec
    store_readable: bool
    applied_now: bool


SHED_TIER_OPTIONS = activity_options(start_to_close=30, max_attempts=10)


class RestoreShedTierInput(MutatingInput):
    """Rollback of the emergency tier, or compensation of apply_shed_tier."""

    namespace: str
    pool: str
    restore_to: TierSpec = Field(default_factory=TierSpec)
    # Evidence that the warm floor is back; the activity refuses without it.
    warm_floor_ready: int
    warm_floor_target: int


class RestoreShedTierResult(BaseModel):
    previous: TierSpec
    applied: TierSpec
    applied_now: bool


RESTORE_SHED_TIER_OPTIONS = activity_options(start_to_close=30, max_attempts=10)


class InflightCounts(BaseModel):
    retried: int = 0
    terminated: int = 0


class RetryContractInput(MutatingInput):
    namespace: str
    pool: str
    lost_pods: list[str]


class RetryContractResult(BaseModel):
    policy: str
    per_replica: dict[str, InflightCounts]
    total_retried: int
    total_terminated: int
    applied_now: bool


RETRY_CONTRACT_OPTIONS = activity_options(start_to_close=30, max_attempts=10)


class RouterWeightsInput(MutatingInput):
    namespace: str
    # Pod name -> weight; a pod absent keeps its weight.
    weights: dict[str, int]


class RouterWeightsResult(BaseModel):
    previous: dict[str, int | None]
    applied: dict[str, int]
    applied_now: bool


ROUTER_WEIGHTS_OPTIONS = activity_options(start_to_close=30, max_attempts=10)


def tier_spec(
    level: int,
    *,
    large_model: str | None = None,
    small_model: str | None = None,
    small_model_context_tokens: int | None = None,
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

    def write_retry_policy(self, namespace: str, pool: str, policy: str, op_id: str) -> bool: ...

    def read_inflight(
        self, namespace: str, pool: str, pods: list[str]
    ) -> dict[str, InflightCounts]: ...

    def read_weights(self, namespace: str, pods: list[str]) -> dict[str, int | None]: ...

    def write_weights(self, namespace: str, weights: dict[str, int], op_id: str) -> None: ...


class GatewayActivities:
    """Activities over one `Gateway`, holding it and the ledger runner."""

    @activity.defn
    def apply_shed_tier(self, input: ShedTierInput) -> ShedTierResult:
        """Choose the tier from the survivors' pressure and apply it (never loosening)."""
        raise NotImplementedError

    @activity.defn
    def restore_shed_tier(self, input: RestoreShedTierInput) -> RestoreShedTierResult:
        """Put back the earlier tier, only once the warm floor is restored."""
        raise NotImplementedError

    @activity.defn
    def apply_retry_contract(self, input: RetryContractInput) -> RetryContractResult:
        """Retry before the first byte only; count retried and terminated per lost replica."""
        raise NotImplementedError

    @activity.defn
    def set_router_weights(self, input: RouterWeightsInput) -> RouterWeightsResult:
        """Set per-pod router weights (ramp steps and their compensation)."""
        raise NotImplementedError
