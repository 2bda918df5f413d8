"""vLLM and DCGM metrics: scrape each pod's /metrics and read per-replica numbers.

Called from `workflows/replica_loss.py` (protect, ramp, verify) through `MetricsActivities`,
and by `activities/ramp.py`, `activities/warmup.py` and `activities/triage.py` through the
pure parsers. Exposition text is parsed with prometheus_client's parser; metric names fall
back across vLLM generations (`vllm:kv_cache_usage_perc` then `vllm:gpu_cache_usage_perc`)
and counters are matched with and without the `_total` suffix.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import Check, PodRef, activity_options


class ReplicaPressure(BaseModel):
    pod: str
    waiting: float | None = None
    running: float | None = None
    kv_cache_usage: float | None = None
    kv_cache_metric: str | None = None
    preemptions_total: float | None = None
    # Per second over the sampling interval (counter delta / seconds).
    preemption_rate: float | None = None
    waiting_delta: float | None = None
    thrashing: bool = False
    thrash_reasons: list[str] = Field(default_factory=list)
    error: str | None = None


class PressureInput(BaseModel):
    targets: list[PodRef]
    # Two scrapes this far apart give the preemption rate and the queue trend.
    sample_interval_s: float = 5.0


class PressureResult(BaseModel):
    replicas: list[ReplicaPressure]
    unreachable: list[str] = Field(default_factory=list)
    total_waiting: float
    total_running: float
    max_kv_cache_usage: float | None
    total_preemption_rate: float
    thrashing: list[str] = Field(default_factory=list)


READ_PRESSURE_OPTIONS = activity_options(start_to_close=60, heartbeat=20, max_attempts=5)


class RatesInput(BaseModel):
    targets: list[PodRef]
    interval_s: float = 10.0


class ReplicaRate(BaseModel):
    pod: str
    requests_per_s: float | None
    ttft_p99_s: float | None
    ttft_samples: float = 0.0
    error: str | None = None


class RatesResult(BaseModel):
    replicas: list[ReplicaRate]
    interval_s: float


READ_RATES_OPTIONS = activity_options(start_to_close=90, heartbeat=30, max_attempts=5)


class VerifyServingInput(BaseModel):
    survivors: list[PodRef]
    new_replicas: list[PodRef] = Field(default_factory=list)
    ttft_slo_s: float = 2.0
    # Waiting requests per replica that count as a drained queue.
    waiting_baseline: float = 0.0
    sample_interval_s: float = 10.0


class VerifyServingResult(BaseModel):
    passed: bool
    checks: list[Check]


VERIFY_SERVING_OPTIONS = activity_options(start_to_close=120, heartbeat=30, max_attempts=5)


class MetricsActivities:
    """Read-only activities over the replicas' /metrics endpoints."""

    @activity.defn
    def read_pressure(self, input: PressureInput) -> PressureResult:
        """Waiting, running, KV-cache usage and preemption rate per survivor; thrash flags."""
        raise NotImplementedError

    @activity.defn
    def read_replica_rates(self, input: RatesInput) -> RatesResult:
        """Measured request rate and TTFT p99 (from the histogram) per replica."""
        raise NotImplementedError

    @activity.defn
    def verify_serving(self, input: VerifyServingInput) -> VerifyServingResult:
        """Queue drained, preemption rate zero, TTFT p99 per pod under the SLO: with numbers."""
        raise NotImplementedError
