"""The router's /metrics: per-replica retried/terminated counters in Prometheus text."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetsim.router import Counters
from fleetsim.router_metrics import router_registry


def samples(counters: Counters) -> dict[tuple[str, str, str], float]:
    text = generate_latest(router_registry(lambda: counters)).decode()
    return {
        (s.name, s.labels["namespace"], s.labels["pod"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_each_replicas_counts_are_exposed_as_total_counters_by_namespace_and_pod() -> None:
    c = Counters()
    c.retried_from_pod[("serving", "llm-a")] = 7
    c.retried_from_pod[("other", "llm-a")] = 1
    c.terminated_on_pod[("serving", "llm-a")] = 2

    assert samples(c) == {
        ("router_requests_retried_total", "serving", "llm-a"): 7.0,
        ("router_requests_retried_total", "other", "llm-a"): 1.0,
        ("router_streams_terminated_total", "serving", "llm-a"): 2.0,
    }


def test_a_scrape_reads_the_counters_as_they_are_at_that_moment() -> None:
    c = Counters()
    registry = router_registry(lambda: c)
    assert b"llm-b" not in generate_latest(registry)

    c.terminated_on_pod[("serving", "llm-b")] += 3

    assert b'router_streams_terminated_total{namespace="serving",pod="llm-b"} 3.0' in (
        generate_latest(registry)
    )
