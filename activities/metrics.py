"""vLLM and DCGM metrics: scrape each pod's /metrics and read per-replica numbers.

Called from `workflows/replica_loss.py` (protect, ramp, verify) through `MetricsActivities`,
and by `activities/ramp.py`, `activities/warmup.py` and `activities/triage.py` through the
pure parsers. Exposition text is parsed with prometheus_client's parser; metric names fall
back across vLLM generations (`vllm:kv_cache_usage_perc` then `vllm:gpu_cache_usage_perc`)
and counters are matched with and without the `_total` suffix.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import (
    READ_HEARTBEAT_S,
    Check,
    PodRef,
    activity_options,
    heartbeat,
    wait,
)
from activities.errors import PermanentError, http_errors

# ---------------------------------------------------------------------------- parsing

KV_CACHE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
WAITING_NAMES = ("vllm:num_requests_waiting",)
RUNNING_NAMES = ("vllm:num_requests_running",)
PREEMPTIONS = "vllm:num_preemptions"
REQUEST_SUCCESS = "vllm:request_success"
TTFT = "vllm:time_to_first_token_seconds"

Labels = dict[str, str]


@dataclass(frozen=True)
class MetricSnapshot:
    """One scrape: sample name -> [(labels, value)], as prometheus_client parsed it."""

    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)

    def rows(self, name: str) -> list[tuple[Labels, float]]:
        """Samples of `name`; a counter the parser suffixed with `_total` is found too."""
        return self.samples.get(name) or self.samples.get(f"{name}_total") or []

    def find(self, *names: str) -> tuple[str, list[tuple[Labels, float]]] | None:
        """The first of `names` present, in order: newer metric names come first."""
        for name in names:
            if self.samples.get(name):
                return name, self.samples[name]
        return None

    def gauge(self, *names: str, agg: str = "sum") -> tuple[str, float] | None:
        found = self.find(*names)
        if found is None:
            return None
        name, rows = found
        values = [v for _, v in rows if not math.isnan(v)]
        if not values:
            return None
        return name, (max(values) if agg == "max" else sum(values))

    def counter(self, base: str) -> float | None:
        """A counter by its documented name, with or without the `_total` suffix."""
        stem = base.removesuffix("_total")
        found = self.gauge(f"{stem}_total", stem)
        return None if found is None else found[1]

    def buckets(self, base: str) -> list[tuple[float, float]]:
        """Cumulative histogram buckets summed over every other label: [(le, count)]."""
        by_le: dict[float, float] = {}
        for labels, value in self.samples.get(f"{base}_bucket", []):
            le = float(labels.get("le", "+Inf"))
            by_le[le] = by_le.get(le, 0.0) + value
        return sorted(by_le.items())


def parse_metrics(text: str) -> MetricSnapshot:
    """Parse Prometheus exposition text with prometheus_client's own parser."""
    samples: dict[str, list[tuple[Labels, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return MetricSnapshot(samples)


def bucket_delta(
    before: list[tuple[float, float]], after: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Buckets of the requests observed between two scrapes (a counter reset restarts)."""
    old = dict(before)
    delta = [(le, count - old.get(le, 0.0)) for le, count in after]
    if any(count < 0 for _, count in delta):
        return list(after)
    return delta


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets (linear within a bucket)."""
    if not buckets:
        return None
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                # Like Prometheus: the answer is the highest finite bound.
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


# ---------------------------------------------------------------------------- pure logic


class ThrashThresholds(BaseModel):
    kv_cache_usage: float = 0.9
    min_preemption_rate: float = 0.0
    min_waiting_growth: float = 0.0


def detect_thrash(
    *,
    waiting_before: float | None,
    waiting_after: float | None,
    kv_cache_usage: float | None,
    preemption_rate: float | None,
    thresholds: ThrashThresholds | None = None,
) -> tuple[bool, list[str]]:
    """Thrash: queue rising, KV cache near its ceiling, and preemptions climbing, together.

    Any one alone is load; the three together mean the replica evicts work it has already
    started to admit more (seed 000, "Protect the survivors").
    """
    t = thresholds or ThrashThresholds()
    reasons: list[str] = []
    rising = (
        waiting_before is not None
        and waiting_after is not None
        and waiting_after - waiting_before > t.min_waiting_growth
    )
    full = kv_cache_usage is not None and kv_cache_usage >= t.kv_cache_usage
    preempting = preemption_rate is not None and preemption_rate > t.min_preemption_rate
    if rising:
        reasons.append(f"waiting rose {waiting_before:g} -> {waiting_after:g}")
    if full:
        reasons.append(f"kv cache usage {kv_cache_usage:.2f} >= {t.kv_cache_usage:.2f}")
    if preempting:
        reasons.append(f"preemptions {preemption_rate:.2f}/s")
    return (rising and full and preempting), reasons


def scrape(http: httpx.Client, url: str, *, timeout: float = 10.0) -> MetricSnapshot:
    """GET `url` (a /metrics address) and parse it."""
    with http_errors("scrape", url):
        response = http.get(url, timeout=timeout)
        response.raise_for_status()
    return parse_metrics(response.text)


def metrics_address(ref: PodRef) -> str:
    if not ref.metrics_url:
        raise PermanentError(f"scrape pod {ref.namespace}/{ref.name}: no metrics address known")
    base = ref.metrics_url.rstrip("/")
    return base if base.endswith("/metrics") else f"{base}/metrics"


# ---------------------------------------------------------------------------- models


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


READ_PRESSURE_OPTIONS = activity_options(
    start_to_close=60, heartbeat=READ_HEARTBEAT_S, max_attempts=5
)


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


READ_RATES_OPTIONS = activity_options(start_to_close=90, heartbeat=READ_HEARTBEAT_S, max_attempts=5)


class VerifyServingInput(BaseModel):
    survivors: list[PodRef]
    new_replicas: list[PodRef] = Field(default_factory=list)
    ttft_slo_s: float = 2.0
    # Waiting requests per replica that count as a drained queue.
    waiting_baseline: float = 0.0
    sample_interval_s: float = 10.0
    # A p99 over fewer requests is their maximum: one stalled request would fail the check.
    # The window is extended, up to `max_window_intervals` intervals, until each pod has these.
    min_ttft_samples: int = 100
    max_window_intervals: int = 6


class VerifyServingResult(BaseModel):
    passed: bool
    checks: list[Check]


VERIFY_SERVING_OPTIONS = activity_options(
    start_to_close=300, heartbeat=READ_HEARTBEAT_S, max_attempts=5
)


# ---------------------------------------------------------------------------- sampling


@dataclass
class Window:
    """Two scrapes of each target `interval_s` apart; a target that failed has an error."""

    interval_s: float
    before: dict[str, MetricSnapshot]
    after: dict[str, MetricSnapshot]
    errors: dict[str, str]


def sample_window(
    http: httpx.Client,
    targets: list[PodRef],
    interval_s: float,
    *,
    timeout: float = 10.0,
    details: tuple[object, ...] = (),
) -> Window:
    """Scrape every target, wait `interval_s` (heartbeating `details`), scrape again.

    It heartbeats before each scrape too, so however many targets time out in a row, the
    activity never goes longer than one scrape's timeout without a heartbeat.

    Temporal keeps only the last heartbeat's details, so a caller that resumes from them
    passes its progress here rather than letting the wait heartbeat an empty one.
    """
    before: dict[str, MetricSnapshot] = {}
    after: dict[str, MetricSnapshot] = {}
    errors: dict[str, str] = {}
    for ref in targets:
        heartbeat(*details)
        try:
            before[ref.name] = scrape(http, metrics_address(ref), timeout=timeout)
        except Exception as exc:  # one dead survivor must not hide the others' numbers
            errors[ref.name] = str(exc)
    started = time.monotonic()
    wait(interval_s, *details)
    for ref in targets:
        if ref.name in errors:
            continue
        heartbeat(*details)
        try:
            after[ref.name] = scrape(http, metrics_address(ref), timeout=timeout)
        except Exception as exc:
            errors[ref.name] = str(exc)
    return Window(max(time.monotonic() - started, 1e-6), before, after, errors)


def extend_window(
    http: httpx.Client,
    window: Window,
    targets: list[PodRef],
    interval_s: float,
    *,
    timeout: float = 10.0,
) -> Window:
    """The same window, `interval_s` longer: keep the first scrapes, scrape the end again."""
    started = time.monotonic() - window.interval_s
    wait(interval_s)
    after = dict(window.after)
    errors = dict(window.errors)
    for ref in targets:
        if ref.name in errors:
            continue
        heartbeat()
        try:
            after[ref.name] = scrape(http, metrics_address(ref), timeout=timeout)
        except Exception as exc:
            errors[ref.name] = str(exc)
            after.pop(ref.name, None)
    return Window(max(time.monotonic() - started, 1e-6), window.before, after, errors)


def short_of_samples(window: Window, min_samples: int) -> list[str]:
    """Pods whose TTFT histogram saw fewer than `min_samples` requests in the window."""
    return [
        name
        for name, after in window.after.items()
        if ttft_p99(window.before[name], after)[1] < min_samples
    ]


def replica_pressure(
    pod: str,
    before: MetricSnapshot,
    after: MetricSnapshot,
    interval_s: float,
    thresholds: ThrashThresholds | None = None,
) -> ReplicaPressure:
    waiting_before = before.gauge(*WAITING_NAMES)
    waiting = after.gauge(*WAITING_NAMES)
    running = after.gauge(*RUNNING_NAMES)
    kv = after.gauge(*KV_CACHE_NAMES, agg="max")
    p_before = before.counter(PREEMPTIONS)
    p_after = after.counter(PREEMPTIONS)
    rate: float | None = None
    if p_after is not None:
        # A restarted engine resets its counters: count from zero then.
        delta = p_after - (p_before or 0.0) if p_after >= (p_before or 0.0) else p_after
        rate = delta / interval_s
    thrash, reasons = detect_thrash(
        waiting_before=None if waiting_before is None else waiting_before[1],
        waiting_after=None if waiting is None else waiting[1],
        kv_cache_usage=None if kv is None else kv[1],
        preemption_rate=rate,
        thresholds=thresholds,
    )
    return ReplicaPressure(
        pod=pod,
        waiting=None if waiting is None else waiting[1],
        running=None if running is None else running[1],
        kv_cache_usage=None if kv is None else kv[1],
        kv_cache_metric=None if kv is None else kv[0],
        preemptions_total=p_after,
        preemption_rate=rate,
        waiting_delta=(
            None if waiting is None or waiting_before is None else waiting[1] - waiting_before[1]
        ),
        thrashing=thrash,
        thrash_reasons=reasons if thrash else [],
    )


def request_rate(before: MetricSnapshot, after: MetricSnapshot, interval_s: float) -> float | None:
    b, a = before.counter(REQUEST_SUCCESS), after.counter(REQUEST_SUCCESS)
    if a is None:
        return None
    delta = a - (b or 0.0) if a >= (b or 0.0) else a
    return delta / interval_s


def ttft_p99(before: MetricSnapshot, after: MetricSnapshot) -> tuple[float | None, float]:
    """TTFT p99 of the requests observed between the scrapes, and how many there were."""
    delta = bucket_delta(before.buckets(TTFT), after.buckets(TTFT))
    observed = delta[-1][1] if delta else 0.0
    return histogram_quantile(0.99, delta), observed


class MetricsActivities:
    """Read-only activities over the replicas' /metrics endpoints."""

    def __init__(self, http: httpx.Client, *, timeout_s: float = 10.0) -> None:
        self.http = http
        self.timeout_s = timeout_s

    @activity.defn
    def read_pressure(self, input: PressureInput) -> PressureResult:
        """Waiting, running, KV-cache usage and preemption rate per survivor; thrash flags."""
        window = sample_window(
            self.http, input.targets, input.sample_interval_s, timeout=self.timeout_s
        )
        replicas = [
            replica_pressure(name, window.before[name], window.after[name], window.interval_s)
            for name in window.after
        ]
        kv = [r.kv_cache_usage for r in replicas if r.kv_cache_usage is not None]
        return PressureResult(
            replicas=replicas,
            unreachable=sorted(window.errors),
            total_waiting=sum(r.waiting or 0.0 for r in replicas),
            total_running=sum(r.running or 0.0 for r in replicas),
            max_kv_cache_usage=max(kv) if kv else None,
            total_preemption_rate=sum(r.preemption_rate or 0.0 for r in replicas),
            thrashing=[r.pod for r in replicas if r.thrashing],
        )

    @activity.defn
    def read_replica_rates(self, input: RatesInput) -> RatesResult:
        """Measured request rate and TTFT p99 (from the histogram) per replica."""
        window = sample_window(self.http, input.targets, input.interval_s, timeout=self.timeout_s)
        replicas: list[ReplicaRate] = []
        for ref in input.targets:
            if ref.name in window.errors:
                replicas.append(
                    ReplicaRate(
                        pod=ref.name,
                        requests_per_s=None,
                        ttft_p99_s=None,
                        error=window.errors[ref.name],
                    )
                )
                continue
            b, a = window.before[ref.name], window.after[ref.name]
            p99, observed = ttft_p99(b, a)
            replicas.append(
                ReplicaRate(
                    pod=ref.name,
                    requests_per_s=request_rate(b, a, window.interval_s),
                    ttft_p99_s=p99,
                    ttft_samples=observed,
                )
            )
        return RatesResult(replicas=replicas, interval_s=window.interval_s)

    @activity.defn
    def verify_serving(self, input: VerifyServingInput) -> VerifyServingResult:
        """Queue drained, preemption rate zero, TTFT p99 per pod under the SLO: with numbers."""
        targets = [*input.survivors, *input.new_replicas]
        window = sample_window(self.http, targets, input.sample_interval_s, timeout=self.timeout_s)
        for _ in range(1, max(1, input.max_window_intervals)):
            if not short_of_samples(window, input.min_ttft_samples):
                break
            window = extend_window(
                self.http, window, targets, input.sample_interval_s, timeout=self.timeout_s
            )
        survivors = [r.name for r in input.survivors]
        waiting: dict[str, float | None] = {}
        preempt: dict[str, float | None] = {}
        ttft: dict[str, float | None] = {}
        observed: dict[str, float] = {}
        for name in window.after:
            pressure = replica_pressure(
                name, window.before[name], window.after[name], window.interval_s
            )
            waiting[name] = pressure.waiting
            preempt[name] = pressure.preemption_rate
            ttft[name], observed[name] = ttft_p99(window.before[name], window.after[name])
        unreachable = dict(window.errors)
        checks = [
            Check(
                name="survivors-queue-drained",
                passed=not any(p in unreachable for p in survivors)
                and all(
                    waiting.get(p) is not None and waiting[p] <= input.waiting_baseline  # type: ignore[operator]
                    for p in survivors
                ),
                evidence={
                    "waiting": {p: waiting.get(p) for p in survivors},
                    "baseline": input.waiting_baseline,
                    "unreachable": unreachable,
                },
            ),
            Check(
                name="survivors-preemption-rate-zero",
                passed=not any(p in unreachable for p in survivors)
                and all(preempt.get(p) == 0.0 for p in survivors),
                evidence={
                    "preemptions_per_s": {p: preempt.get(p) for p in survivors},
                    "interval_s": round(window.interval_s, 3),
                },
            ),
        ]
        slo = input.ttft_slo_s
        per_pod = {r.name: ttft.get(r.name) for r in targets}
        over = [p for p, v in per_pod.items() if v is None or v > slo]
        checks.append(
            Check(
                name="ttft-p99-per-pod-under-slo",
                passed=not over,
                evidence={
                    "ttft_p99_s": per_pod,
                    "requests_in_window": {p: observed.get(p, 0.0) for p in per_pod},
                    "window_s": round(window.interval_s, 3),
                    "slo_s": slo,
                },
                detail=(
                    ""
                    if not over
                    else "over the SLO or without requests in the window: "
                    + ", ".join(sorted(over))
                ),
            )
        )
        return VerifyServingResult(passed=all(c.passed for c in checks), checks=checks)
