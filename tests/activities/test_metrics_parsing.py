"""Metrics: vLLM exposition of every generation parsed with prometheus_client's parser."""

from __future__ import annotations

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from activities.common import PodRef
from activities.metrics import (
    MetricSnapshot,
    bucket_delta,
    detect_thrash,
    histogram_quantile,
    parse_metrics,
    replica_pressure,
    sample_window,
)
from fleetsim.clock import ManualClock
from fleetsim.engine import Engine, EngineConfig
from fleetsim.vllm_metrics import VllmCollector, exposition


def _text(version: str, core: str, **stats: float) -> str:
    engine = Engine(
        EngineConfig(
            model="m", warm_rate=10, cold_frac=1, warmup_s=0, tokens=4, token_interval_s=0.01
        ),
        ManualClock(),
        ready_at=0.0,
        warm=True,
    )
    for key, value in stats.items():
        setattr(engine.stats, key, value)
    return exposition(VllmCollector(engine, model_name="m", version=version, core=core)).decode()


@pytest.mark.parametrize(
    ("version", "core", "kv_name"),
    [
        ("0.9.2", "V1", "vllm:gpu_cache_usage_perc"),  # before the rename
        ("0.9.2", "V0", "vllm:gpu_cache_usage_perc"),
        ("0.10.1", "V0", "vllm:gpu_cache_usage_perc"),  # V0 never got the new name
        ("0.10.1", "V1", "vllm:kv_cache_usage_perc"),  # both exported: the new one wins
        ("0.11.0", "V1", "vllm:kv_cache_usage_perc"),
    ],
)
def test_kv_cache_usage_falls_back_across_vllm_generations(
    version: str, core: str, kv_name: str
) -> None:
    snap = parse_metrics(_text(version, core, running=3, waiting=7, preemptions=5, success=40))
    before = parse_metrics(_text(version, core, running=3, waiting=2, preemptions=1, success=20))

    pressure = replica_pressure("p", before, snap, interval_s=2.0)

    assert pressure.kv_cache_metric == kv_name
    assert (pressure.waiting, pressure.running) == (7, 3)
    assert pressure.preemptions_total == 5 and pressure.preemption_rate == 2.0
    assert pressure.waiting_delta == 5


def test_counters_are_found_with_or_without_the_total_suffix() -> None:
    typed = parse_metrics("# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total 4\n")
    untyped = parse_metrics("vllm:num_preemptions 6\n")
    suffixed_untyped = parse_metrics("vllm:num_preemptions_total 8\n")
    assert typed.counter("vllm:num_preemptions") == 4
    assert untyped.counter("vllm:num_preemptions_total") == 6
    assert suffixed_untyped.counter("vllm:num_preemptions") == 8


def test_gauges_sum_over_engines_and_kv_usage_takes_the_fullest() -> None:
    snap = parse_metrics(
        'vllm:num_requests_waiting{engine="0"} 3\nvllm:num_requests_waiting{engine="1"} 4\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:kv_cache_usage_perc{engine="1"} 0.9\n'
    )
    assert snap.gauge("vllm:num_requests_waiting") == ("vllm:num_requests_waiting", 7)
    assert snap.gauge("vllm:kv_cache_usage_perc", agg="max") == ("vllm:kv_cache_usage_perc", 0.9)


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.99, [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (float("inf"), 100.0)], 0.95),
        (0.5, [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (float("inf"), 100.0)], 0.1),
        (0.99, [(0.1, 0.0), (float("inf"), 10.0)], 0.1),  # Prometheus: highest finite bound
        (0.99, [(0.1, 0.0), (float("inf"), 0.0)], None),  # no observations
    ],
)
def test_histogram_quantile_interpolates_like_prometheus(
    q: float, buckets: list[tuple[float, float]], expected: float | None
) -> None:
    got = histogram_quantile(q, buckets)
    assert got == (None if expected is None else pytest.approx(expected))


def test_ttft_p99_is_taken_over_the_window_not_since_the_replica_started() -> None:
    before = [(0.1, 0.0), (5.0, 100.0), (float("inf"), 100.0)]  # a slow cold start
    after = [(0.1, 200.0), (5.0, 300.0), (float("inf"), 300.0)]  # then 200 fast requests
    window = bucket_delta(before, after)
    assert window == [(0.1, 200.0), (5.0, 200.0), (float("inf"), 200.0)]
    assert histogram_quantile(0.99, window) == pytest.approx(0.099)
    cumulative = histogram_quantile(0.99, after)
    assert cumulative is not None and cumulative > 1.0


def test_a_counter_reset_between_scrapes_counts_from_zero() -> None:
    assert bucket_delta([(1.0, 50.0)], [(1.0, 5.0)]) == [(1.0, 5.0)]
    before = MetricSnapshot({"vllm:num_preemptions_total": [({}, 100.0)]})
    after = MetricSnapshot({"vllm:num_preemptions_total": [({}, 3.0)]})
    assert replica_pressure("p", before, after, 1.0).preemption_rate == 3.0


@pytest.mark.parametrize(
    ("waiting", "kv", "preempt", "thrash"),
    [
        ((5, 20), 0.97, 1.5, True),
        ((20, 5), 0.97, 1.5, False),  # queue draining
        ((5, 20), 0.50, 1.5, False),  # cache has room
        ((5, 20), 0.97, 0.0, False),  # nothing evicted
        ((None, 20), 0.97, 1.5, False),
    ],
)
def test_thrash_needs_a_rising_queue_a_full_cache_and_preemptions_together(
    waiting: tuple[float | None, float], kv: float, preempt: float, thrash: bool
) -> None:
    got, reasons = detect_thrash(
        waiting_before=waiting[0],
        waiting_after=waiting[1],
        kv_cache_usage=kv,
        preemption_rate=preempt,
    )
    assert got is thrash
    assert (len(reasons) == 3) is thrash


def test_a_window_heartbeats_before_every_scrape_so_dead_targets_cannot_outlast_it() -> None:
    # Each target times out on its own clock: without a heartbeat between them, a few dead
    # ones in a row would outlast the heartbeat timeout and the read would be retried.
    scraped: list[str] = []

    def unreachable(request: httpx.Request) -> httpx.Response:
        scraped.append(request.url.host)
        raise httpx.ConnectTimeout("timed out", request=request)

    beats: list[tuple[object, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    targets = [
        PodRef(namespace="serving", name=f"p{i}", metrics_url=f"http://10.0.0.{i}:8000")
        for i in range(3)
    ]
    with httpx.Client(transport=httpx.MockTransport(unreachable)) as http:
        window = env.run(sample_window, http, targets, 0.0, details=("step-2",))
    assert sorted(window.errors) == ["p0", "p1", "p2"]
    assert len(scraped) == 3
    assert beats[:3] == [("step-2",)] * 3
