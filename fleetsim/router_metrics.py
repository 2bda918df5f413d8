"""The router's per-replica retry-contract counters as Prometheus text (`GET /metrics`).

Served by fleetsim's control app (`fleetsim.control`); read by fleetmend's gateway
(`activities.gateway.AnnotationGateway.read_inflight`) exactly as it would read a real
gateway's metrics endpoint. Rendered by prometheus_client from the live `Counters`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from fleetsim.contract import METRIC_ROUTER_RETRIED, METRIC_ROUTER_TERMINATED
from fleetsim.router import Counters


def _family(name: str, doc: str, counts: Counter[tuple[str, str]]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["namespace", "pod"])
    for (namespace, pod), value in sorted(counts.items()):
        family.add_metric([namespace, pod], value)
    return family


class RouterCollector(Collector):
    """Reads the counters at scrape time, so every scrape sees the router's current state."""

    def __init__(self, counters: Callable[[], Counters]) -> None:
        self._counters = counters

    def collect(self) -> Iterator[CounterMetricFamily]:
        c = self._counters()
        yield _family(
            METRIC_ROUTER_RETRIED,
            "Requests sent on to another replica after this one failed before their first byte.",
            c.retried_from_pod,
        )
        yield _family(
            METRIC_ROUTER_TERMINATED,
            "Streams this replica broke after their first byte (terminal error to the caller).",
            c.terminated_on_pod,
        )


def router_registry(counters: Callable[[], Counters]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RouterCollector(counters))
    return registry
