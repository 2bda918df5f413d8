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
