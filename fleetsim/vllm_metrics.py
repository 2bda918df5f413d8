"""vLLM's `/metrics` for one simulated engine, with the names the configured release uses.

Called by `fleetsim.replica` on every scrape. Which names appear depends on the engine
release and core, as the runbook describes the June 2025 move:

* releases before 0.10, either core: `vllm:gpu_cache_usage_perc` only;
* 0.10.x: the V1 core exports both `vllm:kv_cache_usage_perc` and the deprecated
  `vllm:gpu_cache_usage_perc`; the V0 core only the old name;
* 0.11 and later (V1 only): `vllm:kv_cache_usage_perc` only.

Prefix caching: V0 exports a `vllm:gpu_prefix_cache_hit_rate` gauge; V1 exports query and
hit counters (`vllm:gpu_prefix_cache_*` before 0.10, `vllm:prefix_cache_*` from 0.11,
both in 0.10.x). Counters are declared without `_total`; the Prometheus client appends
it at exposition, as it does for vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from fleetsim.engine import TTFT_BUCKETS, Engine


@dataclass(frozen=True)
class MetricNames:
    kv_usage: tuple[str, ...]
    prefix_counters: tuple[str, ...]  # prefixes; `_queries` / `_hits` are appended
    prefix_hit_rate_gauge: bool
    engine_label: bool


def _release(version: str) -> tuple[int, int]:
    major, minor, *_ = (int(p) for p in version.split("."))
    return major, minor


def metric_names(version: str, core: str) -> MetricNames:
    rel = _release(version)
    if core == "V0":
        return MetricNames(("vllm:gpu_cache_usage_perc",), (), True, False)
    if rel < (0, 10):
        return MetricNames(("vllm:gpu_cache_usage_perc",), ("vllm:gpu_prefix_cache",), False, True)
    if rel < (0, 11):
        return MetricNames(
            ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            ("vllm:prefix_cache", "vllm:gpu_prefix_cache"),
            False,
            True,
        )
    return MetricNames(("vllm:kv_cache_usage_perc",), ("vllm:prefix_cache",), False, True)


class VllmCollector(Collector):
    def __init__(self, engine: Engine, *, model_name: str, version: str, core: str) -> None:
        self.engine = engine
        self.names = metric_names(version, core)
        self.label_names = ["model_name", "engine"] if self.names.engine_label else ["model_name"]
        self.label_values = [model_name, "0"] if self.names.engine_label else [model_name]

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=self.label_names)
        g.add_metric(self.label_values, value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=self.label_names)
        c.add_metric(self.label_values, value)
        return c

    def collect(self) -> Iterator[Metric]:
        e, s = self.engine, self.engine.stats
        yield self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", s.running
        )
        yield self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting
        )
        for name in self.names.kv_usage:
            yield self._gauge(
                name, "KV-cache usage. 1 means 100 percent usage.", e.kv_cache_usage()
            )
        yield self._counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            s.preemptions,
        )
        for prefix in self.names.prefix_counters:
            yield self._counter(
                f"{prefix}_queries", "Prefix cache queries, in terms of tokens.", s.prefix_queries
            )
            yield self._counter(
                f"{prefix}_hits", "Prefix cache hits, in terms of tokens.", s.prefix_hits
            )
        if self.names.prefix_hit_rate_gauge:
            rate = s.prefix_hits / s.prefix_queries if s.prefix_queries else 0.0
            yield self._gauge(
                "vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", rate
            )
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens
        )
        yield self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*self.label_names, "finished_reason"],
        )
        success.add_metric([*self.label_values, "length"], s.success)
        yield success
        hist = HistogramMetricFamily(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels=self.label_names,
        )
        cumulative, buckets = 0, []
        for bound, n in zip(TTFT_BUCKETS, s.ttft_counts, strict=False):
            cumulative += n
            buckets.append((repr(float(bound)), float(cumulative)))
        buckets.append(("+Inf", float(s.ttft_count)))
        hist.add_metric(self.label_values, buckets, s.ttft_sum)
        yield hist


def exposition(collector: VllmCollector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
