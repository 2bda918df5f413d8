"""In-flight: per lost replica, the gateway's retried/terminated counts are the router's own.

The fleet runs over HTTP on its own thread; its control app serves the router's
/metrics, which the AnnotationGateway scrapes as it would a real gateway's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from temporalio.testing import ActivityEnvironment

from activities.config import ActivitySettings
from activities.effects import EffectRunner
from activities.gateway import AnnotationGateway, GatewayActivities, RetryContractInput
from fleetsim.contract import METRIC_ROUTER_RETRIED, METRIC_ROUTER_TERMINATED
from fleetsim.control import control_app
from fleetsim.fleet import Fleet

from .conftest import NS, POOL, FleetHandle, scenario


def overloaded_pool() -> dict[str, object]:
    """Two replicas offered more streams than they serve: each has some running, some queued."""
    spec = scenario(replicas=2, warm=0, rate=14.0, warm_rate=4.0, nodes=3)
    spec["rates"]["tokens"] = 20  # type: ignore[index]
    spec["traffic"][0]["stream_fraction"] = 1.0  # type: ignore[index]
    return spec


async def kill_with_streams_in_flight(fleet: Fleet) -> str:
    """OOM-kill the first replica while it streams to some callers and queues others.

    A stream is a second of tokens, so of two running most are past their first byte."""
    victim = fleet.injector.replicas(NS, POOL)[0]["metadata"]["name"]
    engine = fleet.kubelet.pods[NS, victim].engine
    assert engine is not None
    for _ in range(2000):
        if engine.stats.running >= 2 and engine.stats.waiting >= 1:
            break
        await asyncio.sleep(0.005)
    else:
        raise AssertionError(f"{victim} never had a running and a queued request")
    fleet.inject(
        {"kind": "pod-oom-killed", "at": 0, "target": {"namespace": NS, "pool": POOL, "replica": 0}}
    )
    # Let the retries land, then freeze the counters: no new request, none in flight.
    await fleet.sleep(3.0)
    for gen in fleet.traffic:
        await gen.stop(drain=True)
    return victim


def router_counts(handle: FleetHandle, pod: str) -> tuple[int, int]:
    c = handle.fleet.counters
    return c.retried_from_pod[NS, pod], c.terminated_on_pod[NS, pod]


def test_the_metric_names_the_gateway_reads_are_the_ones_the_router_exposes() -> None:
    s = ActivitySettings()
    assert s.router_retried_metric == f"{METRIC_ROUTER_RETRIED}_total"
    assert s.router_terminated_metric == f"{METRIC_ROUTER_TERMINATED}_total"


def test_per_lost_replica_retried_and_terminated_counts_equal_the_routers_own(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(overloaded_pool(), speed=5.0)
    fleet = handle.fleet
    ip, port = handle.run(fleet.host.serve("127.0.0.1", 0, control_app(fleet)))
    victim = handle.run(kill_with_streams_in_flight(fleet))
    survivor = next(p for (ns, p), rt in fleet.kubelet.pods.items() if ns == NS and p != victim
                    and rt.role == "replica")  # fmt: skip
    expected = router_counts(handle, victim)
    gateway = AnnotationGateway(
        handle.api, http=handle.http, router_metrics_url=f"http://{ip}:{port}/metrics"
    )

    lost = [victim, survivor]
    inflight = RetryContractInput(
        op_id="i/inflight", incident_id="i", namespace=NS, pool=POOL, lost_pods=lost
    )
    result = ActivityEnvironment().run(
        GatewayActivities(gateway, runner).apply_retry_contract, inflight
    )

    retried, terminated = expected
    assert retried > 0 and terminated > 0, f"the kill caught nothing in flight: {expected}"
    assert router_counts(handle, victim) == expected  # nothing moved while the activity ran
    assert result.counts_available
    assert (result.per_replica[victim].retried, result.per_replica[victim].terminated) == expected
    survivor_counts = result.per_replica[survivor]
    assert (survivor_counts.retried, survivor_counts.terminated) == router_counts(handle, survivor)
    assert result.total_retried == retried + survivor_counts.retried
    assert result.total_terminated == terminated + survivor_counts.terminated
    text = httpx.get(f"http://{ip}:{port}/metrics").text
    assert f'router_requests_retried_total{{namespace="{NS}",pod="{victim}"}} {retried}.0' in text
