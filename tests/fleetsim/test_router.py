"""The router: routing set from EndpointSlices and the router-only label, weights,
shed tiers, retry before the first byte, terminated streams, duplicate actions."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from fleetsim.actions import ActionSink
from fleetsim.clock import ManualClock, ScaledClock
from fleetsim.contract import (
    ANNOTATION_FALLBACK_SERVICE,
    ANNOTATION_ROUTER_WEIGHT,
    ANNOTATION_SHED_TIER,
)
from fleetsim.engine import Engine, EngineConfig
from fleetsim.kube.store import Store
from fleetsim.netserve import AddressHost
from fleetsim.replica import HEADER_ARRIVED_AT, HEADER_QUEUE_WAIT, Replica, ReplicaIdentity
from fleetsim.router import Router, TrafficRequest

NS, SVC = "serving", "llm"


@dataclass
class Bed:
    store: Store
    host: AddressHost
    router: Router
    replicas: dict[str, Replica]
    addresses: dict[str, tuple[str, int]]
    actions: ActionSink


def pod(name: str, ip: str, port: int, *, serving: bool = True, weight: str | None = None):
    labels = {"app": SVC}
    if serving:
        labels["serving"] = "true"
    meta: dict = {"name": name, "namespace": NS, "labels": labels}
    if weight is not None:
        meta["annotations"] = {ANNOTATION_ROUTER_WEIGHT: weight}
    return {
        "metadata": meta,
        "spec": {
            "containers": [{"name": "vllm", "image": "vllm", "ports": [{"containerPort": port}]}]
        },
        "status": {"podIP": ip, "phase": "Running"},
    }


def endpoint_slice(eps: list[tuple[str, str, bool]], port: int) -> dict:
    return {
        "metadata": {
            "name": f"{SVC}-abc",
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": SVC},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": [ip],
                "conditions": {"ready": ready, "serving": ready, "terminating": False},
                "targetRef": {"kind": "Pod", "name": name, "namespace": NS},
            }
            for name, ip, ready in eps
        ],
    }


@pytest.fixture
async def bed() -> AsyncIterator[Bed]:
    clock = ScaledClock(20)
    store = Store(clock=clock)
    host = AddressHost()
    actions = ActionSink()
    block = f"127.{random.randint(20, 250)}.{random.randint(0, 250)}"
    replicas, addresses = {}, {}
    port = 0
    for i, name in enumerate(("llm-a", "llm-b", "llm-c")):
        cfg = EngineConfig("m", warm_rate=200.0, cold_frac=1.0, warmup_s=0, tokens=6,
                           token_interval_s=0.02)  # fmt: skip
        engine = Engine(cfg, clock, ready_at=0.0, warm=True)
        ident = ReplicaIdentity(NS, name, SVC, "m", "r1", "0.10.1", "V1", "gpu-0")
        replicas[name] = Replica(ident, engine, actions=actions)
        addresses[name] = await host.serve(f"{block}.{i + 2}", port, replicas[name].app)
        port = addresses[name][1]
    store.create("services", {"metadata": {"name": SVC, "namespace": NS},
                              "spec": {"selector": {"app": SVC, "serving": "true"}}})  # fmt: skip
    router = Router(store, clock, seed=1)
    yield Bed(store, host, router, replicas, addresses, actions)
    await router.aclose()
    await host.close_all()


def publish(bed: Bed, ready: dict[str, bool], **pod_kw: dict) -> None:
    port = next(iter(bed.addresses.values()))[1]
    for name, (ip, _) in bed.addresses.items():
        if bed.store.try_get("pods", name, namespace=NS) is None:
            bed.store.create("pods", pod(name, ip, port, **pod_kw.get(name, {})))
    eps = [(n, bed.addresses[n][0], r) for n, r in ready.items()]
    existing = bed.store.try_get("endpointslices", f"{SVC}-abc", namespace=NS)
    if existing:
        bed.store.delete("endpointslices", f"{SVC}-abc", namespace=NS)
    bed.store.create("endpointslices", endpoint_slice(eps, port))


async def send(bed: Bed, n: int, **kw) -> list[str]:
    reqs = [TrafficRequest(id=f"r{i}", namespace=NS, service=SVC, **kw) for i in range(n)]
    return await asyncio.gather(*(bed.router.handle(r) for r in reqs))


async def test_only_ready_serving_endpoints_get_traffic_in_proportion_to_weight(bed: Bed) -> None:
    publish(
        bed,
        {"llm-a": True, "llm-b": True, "llm-c": False},
        **{"llm-b": {"weight": "300"}},
    )
    await send(bed, 80)
    by_pod = bed.router.counters.served_by_pod
    assert by_pod["llm-c"] == 0
    assert by_pod["llm-a"] + by_pod["llm-b"] == 80
    assert by_pod["llm-b"] > 2 * by_pod["llm-a"]

    # Removing the router-only label deroutes the pod even while its slice says ready.
    bed.store.patch("pods", "llm-b", {"metadata": {"labels": {"serving": None}}}, namespace=NS)
    before = by_pod["llm-b"]
    routed_before = bed.router.counters.routed_by_pod["llm-b"]
    await send(bed, 20)
    assert by_pod["llm-b"] == before and by_pod["llm-a"] >= 20
    assert bed.router.counters.routed_by_pod["llm-b"] == routed_before
    assert bed.router.counters.routed_by_pod["llm-a"] >= 20


async def test_zero_weight_takes_a_pod_out_and_no_endpoint_fails(bed: Bed) -> None:
    publish(bed, {"llm-a": True}, **{"llm-a": {"weight": "0"}})
    outcomes = await send(bed, 3)
    assert outcomes == ["failed"] * 3
    assert bed.router.counters.no_endpoint == 3


async def test_shed_tiers_refuse_low_priority_then_everything(bed: Bed) -> None:
    publish(bed, {"llm-a": True, "llm-b": True})
    bed.store.patch("services", SVC, {"metadata": {"annotations": {ANNOTATION_SHED_TIER: "3"}}},
                    namespace=NS)  # fmt: skip
    assert await send(bed, 2, priority="low") == ["shed", "shed"]
    assert await send(bed, 2, priority="high") == ["served", "served"]
    bed.store.patch("services", SVC, {"metadata": {"annotations": {ANNOTATION_SHED_TIER: "4"}}},
                    namespace=NS)  # fmt: skip
    assert await send(bed, 2, priority="high") == ["shed", "shed"]
    bed.store.patch("services", SVC, {"metadata": {"annotations": {ANNOTATION_SHED_TIER: "1"}}},
                    namespace=NS)  # fmt: skip
    assert await send(bed, 2) == ["served", "served"]
    c = bed.router.counters
    assert c.shed == 4 and c.degraded == 4


async def test_shed_tier_2_sends_requests_to_the_fallback_service(bed: Bed) -> None:
    publish(bed, {"llm-a": True, "llm-b": True})
    port = bed.addresses["llm-c"][1]
    small_slice = endpoint_slice([("llm-c", bed.addresses["llm-c"][0], True)], port)
    small_slice["metadata"].update(name="small-abc", labels={"kubernetes.io/service-name": "small"})
    bed.store.create("endpointslices", small_slice)
    bed.store.create("services", {"metadata": {"name": "small", "namespace": NS},
                                  "spec": {"selector": {"app": "small"}}})  # fmt: skip
    bed.store.patch(
        "services",
        SVC,
        {"metadata": {"annotations": {ANNOTATION_SHED_TIER: "2",
                                      ANNOTATION_FALLBACK_SERVICE: "small"}}},
        namespace=NS,
    )  # fmt: skip
    assert await send(bed, 4) == ["served"] * 4
    c = bed.router.counters
    assert c.served_by_pod["llm-c"] == 4 and c.degraded == 4


async def test_a_dead_replica_is_retried_elsewhere_before_the_first_byte(bed: Bed) -> None:
    publish(bed, {"llm-a": True, "llm-b": True})
    bed.replicas["llm-a"].engine.kill()
    await bed.host.close(bed.addresses["llm-a"])
    outcomes = await send(bed, 20)
    c = bed.router.counters
    assert outcomes == ["served"] * 20
    assert c.retried > 0 and c.served_by_pod["llm-a"] == 0 and c.failed == 0
    # Every retry was away from the dead replica, and is counted against it.
    assert c.retried_from_pod == {(NS, "llm-a"): c.retries}


async def test_a_replica_dying_mid_stream_terminates_the_stream(bed: Bed) -> None:
    publish(bed, {"llm-a": True})
    task = asyncio.create_task(send(bed, 1, action_id="op-1", max_tokens=40))
    for _ in range(200):
        if bed.replicas["llm-a"].engine.stats.generation_tokens >= 25:
            break
        await asyncio.sleep(0.005)
    bed.replicas["llm-a"].engine.kill()
    await bed.host.close(bed.addresses["llm-a"])
    assert await task == ["terminated"]
    assert bed.router.counters.terminated == 1 and bed.router.counters.retried == 0
    assert bed.router.counters.terminated_on_pod == {(NS, "llm-a"): 1}
    assert not bed.router.counters.retried_from_pod
    assert bed.actions.executed == 1 and bed.actions.duplicates == 0


async def test_replaying_after_the_first_byte_duplicates_the_action(bed: Bed) -> None:
    publish(bed, {"llm-a": True, "llm-b": True})
    bed.router.replay_after_first_byte = True
    bed.router._random.seed(3)
    task = asyncio.create_task(send(bed, 1, action_id="op-9", max_tokens=40))
    victim = None
    for _ in range(400):
        victim = next(
            (n for n, r in bed.replicas.items() if r.engine.stats.generation_tokens >= 25), None
        )
        if victim:
            break
        await asyncio.sleep(0.005)
    assert victim is not None
    bed.replicas[victim].engine.kill()
    await bed.host.close(bed.addresses[victim])
    assert await task == ["served"]
    assert bed.router.counters.replayed == 1
    assert bed.actions.executions["op-9"] == 2 and bed.actions.duplicates == 1


async def test_requests_queued_past_the_deadline_count_late(bed: Bed) -> None:
    publish(bed, {"llm-a": True})
    bed.replicas["llm-a"].engine.config.warm_rate = 10.0  # 0.1 s apart
    outcomes = await send(bed, 12, deadline_s=0.5, max_tokens=1)
    c = bed.router.counters
    assert outcomes.count("late") == c.late == c.late_by_pod["llm-a"] > 0
    assert c.served == 12 and c.max_wait_by_pod["llm-a"] > 0.5


async def test_each_attempt_carries_its_offered_arrival_and_a_retry_adds_the_time_lost() -> None:
    clock = ManualClock(start=10.0)
    store = Store(clock=clock)
    store.create("services", {"metadata": {"name": SVC, "namespace": NS}, "spec": {}})
    for name, ip in (("llm-a", "10.0.0.2"), ("llm-b", "10.0.0.3")):
        store.create("pods", pod(name, ip, 8000))
    store.create(
        "endpointslices",
        endpoint_slice([("llm-a", "10.0.0.2", True), ("llm-b", "10.0.0.3", True)], 8000),
    )
    stamps: list[str | None] = []

    async def replica(request: httpx.Request) -> httpx.Response:
        stamps.append(request.headers.get(HEADER_ARRIVED_AT))
        if len(stamps) == 1:
            # The first replica takes 3 s of fleet time to fail before the first byte.
            await clock.advance(3.0)
            return httpx.Response(503)
        return httpx.Response(200, headers={HEADER_QUEUE_WAIT: "0.5"}, text="{}")

    client = httpx.AsyncClient(transport=httpx.MockTransport(replica))
    router = Router(store, clock, client=client)
    try:
        # Offered at 7.0, picked up by the router at 10.0 after a stall of the loop.
        offered = TrafficRequest(id="r1", namespace=NS, service=SVC, stream=False, arrived_at=7.0)
        assert await router.handle(offered) == "served"
        assert stamps == [repr(7.0), repr(10.0)]
        assert router.counters.max_wait_by_pod == pytest.approx(
            {next(iter(router.counters.served_by_pod)): 3.5}
        )

        # Requests from anyone but the traffic generator carry no stamp.
        unstamped = TrafficRequest(id="r2", namespace=NS, service=SVC, stream=False)
        assert await router.handle(unstamped) == "served"
        assert stamps[-1] is None
    finally:
        await router.aclose()
        await client.aclose()
