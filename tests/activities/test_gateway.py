"""Gateway: last known tier when the store is down, rollback rule, retry contract, weights."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.config import ActivitySettings
from activities.effects import EffectRunner
from activities.gateway import (
    TIER_MODEL_FALLBACK,
    TIER_NONE,
    TIER_QUEUE_429,
    AnnotationGateway,
    GatewayActivities,
    PressureSummary,
    RestoreShedTierInput,
    RetryContractInput,
    RouterWeightsInput,
    ShedTierInput,
)

from .conftest import NS, POOL, FleetHandle, scenario


def _unreachable_api() -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: nothing answers
    return client.ApiClient(configuration)


def test_when_the_tier_store_cannot_be_read_the_last_known_tier_is_kept(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    acts = GatewayActivities(AnnotationGateway(handle.api), runner)
    env = ActivityEnvironment()
    env.run(
        acts.apply_shed_tier,
        ShedTierInput(
            op_id="i/shed/1",
            incident_id="i",
            namespace=NS,
            pool=POOL,
            pressure=PressureSummary(healthy_replicas=2, thrashing_replicas=1),
        ),
    )
    acts.gateway = AnnotationGateway(_unreachable_api(), ActivitySettings(kubernetes_timeout_s=1))

    calm = env.run(
        acts.apply_shed_tier,
        ShedTierInput(
            op_id="i/shed/2",
            incident_id="i",
            namespace=NS,
            pool=POOL,
            pressure=PressureSummary(healthy_replicas=4),
        ),
    )

    assert calm.store_readable is False
    assert calm.applied.level == TIER_QUEUE_429 and not calm.applied_now


def test_a_fresh_worker_keeps_the_workflows_last_known_tier_when_the_store_is_down(
    runner: EffectRunner,
) -> None:
    broken = AnnotationGateway(_unreachable_api(), ActivitySettings(kubernetes_timeout_s=1))
    result = ActivityEnvironment().run(
        GatewayActivities(broken, runner).apply_shed_tier,
        ShedTierInput(
            op_id="i/shed/3",
            incident_id="i",
            namespace=NS,
            pool=POOL,
            pressure=PressureSummary(healthy_replicas=4),
            last_known_level=TIER_MODEL_FALLBACK,
        ),
    )
    assert result.applied.level == TIER_MODEL_FALLBACK
    assert result.decision.level == TIER_MODEL_FALLBACK


def shed_input(*, max_kv_cache_usage: float) -> ShedTierInput:
    return ShedTierInput(
        op_id="i/shed",
        incident_id="i",
        namespace=NS,
        pool=POOL,
        pressure=PressureSummary(healthy_replicas=3, max_kv_cache_usage=max_kv_cache_usage),
    )


def restore_input(*, warm_floor_ready: int) -> RestoreShedTierInput:
    """Undo "i/shed" with a warm floor of one, `warm_floor_ready` of it back."""
    return RestoreShedTierInput(
        op_id="i/rollback/shed",
        incident_id="i",
        namespace=NS,
        pool=POOL,
        warm_floor_ready=warm_floor_ready,
        warm_floor_target=1,
        compensates="i/shed",
    )


def test_the_shed_tier_is_removed_only_once_the_warm_floor_is_restored(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    acts = GatewayActivities(AnnotationGateway(handle.api), runner)
    env = ActivityEnvironment()
    shed = env.run(
        acts.apply_shed_tier,
        shed_input(max_kv_cache_usage=0.99),
    )
    assert shed.applied.level == TIER_MODEL_FALLBACK

    with pytest.raises(ApplicationError) as refused:
        env.run(
            acts.restore_shed_tier,
            restore_input(warm_floor_ready=0),
        )
    assert refused.value.non_retryable and "warm floor 0/1" in str(refused.value)
    assert handle.call(handle.fleet.router.table, NS, POOL).shed_tier == TIER_MODEL_FALLBACK

    restored = env.run(
        acts.restore_shed_tier,
        restore_input(warm_floor_ready=1),
    )
    assert restored.previous.level == TIER_MODEL_FALLBACK
    assert restored.applied.level == TIER_NONE and restored.applied_now
    notes = handle.store.get("services", POOL, namespace=NS)["metadata"].get("annotations") or {}
    assert "gateway.fleetmend.io/shed-tier" not in notes
    assert handle.call(handle.fleet.router.table, NS, POOL).shed_tier == TIER_NONE
    record = runner.ledger.get("i/rollback/shed")
    assert record is not None and record.compensates == "i/shed"


ROUTER_METRICS = """\
# TYPE router_requests_retried counter
router_requests_retried_total{namespace="serving",pod="llm-a"} 12
router_requests_retried_total{namespace="serving",pod="llm-b"} 3
router_requests_retried_total{namespace="other",pod="llm-a"} 99
# TYPE router_streams_terminated counter
router_streams_terminated_total{namespace="serving",pod="llm-a"} 2
"""


def test_the_retry_contract_is_set_and_outcomes_are_counted_per_lost_replica(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    router = httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, text=ROUTER_METRICS))
    )
    gateway = AnnotationGateway(
        handle.api, http=router, router_metrics_url="http://router.invalid/metrics"
    )

    result = ActivityEnvironment().run(
        GatewayActivities(gateway, runner).apply_retry_contract,
        RetryContractInput(
            op_id="i/inflight",
            incident_id="i",
            namespace=NS,
            pool=POOL,
            lost_pods=["llm-a", "llm-b"],
        ),
    )

    assert result.policy == "retry-before-first-byte" and result.applied_now
    assert result.per_replica["llm-a"].retried == 12 and result.per_replica["llm-a"].terminated == 2
    assert result.per_replica["llm-b"].retried == 3 and result.per_replica["llm-b"].terminated == 0
    assert (result.total_retried, result.total_terminated) == (15, 2)
    notes = handle.store.get("services", POOL, namespace=NS)["metadata"]["annotations"]
    assert notes["gateway.fleetmend.io/retry-policy"] == "retry-before-first-byte"


def test_router_weights_are_set_per_pod_and_the_previous_ones_returned(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    names = [p["metadata"]["name"] for p in handle.pods(f"app={POOL},pool=serving")]
    weights = {names[0]: 10, names[1]: 300}

    result = ActivityEnvironment().run(
        GatewayActivities(AnnotationGateway(handle.api), runner).set_router_weights,
        RouterWeightsInput(op_id="i/w", incident_id="i", namespace=NS, weights=weights),
    )

    assert result.previous == {names[0]: None, names[1]: None}
    table = handle.call(handle.fleet.router.table, NS, POOL)
    seen = {e.pod: e.weight for e in table.endpoints}
    assert seen[names[0]] == 10 and seen[names[1]] == 300
    assert seen[names[2]] == 100  # untouched pods keep the default


def test_the_retry_contract_holds_even_when_the_routers_counters_cannot_be_read(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))

    result = ActivityEnvironment().run(
        GatewayActivities(AnnotationGateway(handle.api), runner).apply_retry_contract,
        RetryContractInput(
            op_id="i/inflight", incident_id="i", namespace=NS, pool=POOL, lost_pods=["x"]
        ),
    )

    assert result.policy == "retry-before-first-byte" and result.applied_now
    assert result.counts_available is False and "router metrics" in (result.counts_error or "")
    assert result.per_replica == {}


def test_undoing_a_tier_that_tightened_nothing_writes_nothing_and_keeps_the_tier(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    acts = GatewayActivities(AnnotationGateway(handle.api), runner)
    env = ActivityEnvironment()
    # Calm survivors: the tier step decides nothing is needed and records nothing.
    shed = env.run(
        acts.apply_shed_tier,
        shed_input(max_kv_cache_usage=0.1),
    )
    assert not shed.applied_now and runner.ledger.get("i/shed") is None

    restored = env.run(
        acts.restore_shed_tier,
        restore_input(warm_floor_ready=1),
    )

    assert not restored.applied_now and restored.applied == restored.previous
    assert runner.ledger.get("i/rollback/shed") is None
    assert handle.fleet.kube_server.mutations.writes("i/rollback/shed") == 0
