"""Verify: per pod and per check, each returning the numbers it read."""

from __future__ import annotations

from collections.abc import Callable

from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, PromoteWarmInput, VerifyCapacityInput
from activities.config import ActivitySettings
from activities.effects import EffectRunner
from activities.metrics import MetricsActivities, VerifyServingInput

from .conftest import MODEL, NS, POOL, REV, FleetHandle, cordon, scenario


def _checks(result) -> dict:  # type: ignore[no-untyped-def]
    return {c.name: c for c in result.checks}


def test_a_whole_fleet_passes_every_capacity_check_with_its_numbers(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=2))
    acts = ClusterActivities(handle.api, runner, ActivitySettings())
    node = handle.pods(f"app={POOL},pool=serving")[0]["spec"]["nodeName"]
    cordon(acts, node, f"i/cordon/{node}")

    result = ActivityEnvironment().run(
        acts.verify_capacity,
        VerifyCapacityInput(
            namespace=NS,
            pool=POOL,
            service=POOL,
            target_replicas=4,
            warm_floor_target=1,
            failed_nodes=[node],
        ),
    )

    checks = _checks(result)
    assert result.passed, result
    assert checks["workload-ready-replicas"].evidence["ready_replicas"] == 4
    assert checks["endpointslice-ready-endpoints"].evidence["ready"] == 4
    assert checks["warm-floor-restored"].evidence["warm_ready"] == 1
    assert checks["failed-nodes-cordoned"].evidence["nodes"][node] == {
        "exists": True,
        "unschedulable": True,
        "qualified": "false",
    }


def test_a_spent_warm_floor_and_an_uncordoned_failed_node_fail_verification(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=2))
    acts = ClusterActivities(handle.api, runner, ActivitySettings())
    ActivityEnvironment().run(
        acts.promote_warm,
        PromoteWarmInput(
            op_id="i/promote", incident_id="i", namespace=NS, pool=POOL, model=MODEL, revision=REV
        ),
    )
    node = handle.pods(f"app={POOL},pool=serving")[0]["spec"]["nodeName"]

    result = ActivityEnvironment().run(
        acts.verify_capacity,
        VerifyCapacityInput(
            namespace=NS,
            pool=POOL,
            service=POOL,
            target_replicas=4,
            warm_floor_target=1,
            failed_nodes=[node],
        ),
    )

    checks = _checks(result)
    assert not result.passed
    assert not checks["warm-floor-restored"].passed
    assert checks["warm-floor-restored"].evidence["warm_ready"] == 0
    assert not checks["failed-nodes-cordoned"].passed
    # The promoted spare is serving: five ready endpoints, and the workload still has four.
    assert checks["endpointslice-ready-endpoints"].evidence["ready"] == 5
    assert checks["workload-ready-replicas"].passed


def _refs(handle: FleetHandle) -> list:
    return [handle.ref(p) for p in handle.pods(f"app={POOL},pool=serving")]


def test_calm_survivors_pass_queue_preemption_and_per_pod_ttft_checks(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    # A fleet at a tenth of its capacity: nothing queues, nothing is preempted.
    handle = fleet_factory(scenario(rate=6, warm_rate=16))

    result = ActivityEnvironment().run(
        MetricsActivities(handle.http).verify_serving,
        VerifyServingInput(
            survivors=_refs(handle), ttft_slo_s=2.0, waiting_baseline=1, sample_interval_s=1.5
        ),
    )

    checks = _checks(result)
    assert result.passed, result
    ttft = checks["ttft-p99-per-pod-under-slo"].evidence["ttft_p99_s"]
    assert len(ttft) == 4 and all(v is not None and v < 2.0 for v in ttft.values())
    assert all(
        v == 0.0
        for v in checks["survivors-preemption-rate-zero"].evidence["preemptions_per_s"].values()
    )


def test_overloaded_survivors_fail_verification_with_their_queue_depths(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    handle = fleet_factory(scenario(replicas=2, warm=0, rate=60, warm_rate=2), speed=1.0)

    result = ActivityEnvironment().run(
        MetricsActivities(handle.http).verify_serving,
        VerifyServingInput(survivors=_refs(handle), ttft_slo_s=2.0, sample_interval_s=1.0),
    )

    checks = _checks(result)
    assert not result.passed
    queue = checks["survivors-queue-drained"]
    assert not queue.passed
    assert any(v and v > 0 for v in queue.evidence["waiting"].values())
    assert not checks["survivors-preemption-rate-zero"].passed


def test_measured_rate_and_ttft_p99_are_read_per_replica(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    from activities.metrics import RatesInput

    handle = fleet_factory(scenario(rate=8, warm_rate=16))

    result = ActivityEnvironment().run(
        MetricsActivities(handle.http).read_replica_rates,
        RatesInput(targets=_refs(handle), interval_s=1.0),
    )

    assert len(result.replicas) == 4 and result.interval_s >= 1.0
    for r in result.replicas:
        assert r.error is None
        assert r.requests_per_s is not None and r.requests_per_s > 0
        assert r.ttft_p99_s is not None and r.ttft_samples > 0
    # About the offered load: 8 requests per fleet second at 10x speed, spread over four.
    total = sum(r.requests_per_s or 0 for r in result.replicas)
    assert 40 <= total <= 120


def test_a_p99_is_judged_over_enough_requests_the_window_grows_until_each_pod_has_them(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    # About 5 requests per wall second per pod: one 1 s interval holds too few for a p99.
    handle = fleet_factory(scenario(rate=2, warm_rate=16))

    result = ActivityEnvironment().run(
        MetricsActivities(handle.http).verify_serving,
        VerifyServingInput(survivors=_refs(handle), sample_interval_s=1.0, min_ttft_samples=15),
    )

    ttft = _checks(result)["ttft-p99-per-pod-under-slo"].evidence
    assert ttft["window_s"] >= 2.0
    assert all(n >= 15 for n in ttft["requests_in_window"].values()), ttft


def test_the_grown_window_stops_at_its_limit_and_still_judges(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    handle = fleet_factory(scenario(rate=2, warm_rate=16))

    result = ActivityEnvironment().run(
        MetricsActivities(handle.http).verify_serving,
        VerifyServingInput(
            survivors=_refs(handle),
            sample_interval_s=0.5,
            min_ttft_samples=1_000_000,
            max_window_intervals=3,
        ),
    )

    ttft = _checks(result)["ttft-p99-per-pod-under-slo"].evidence
    assert 1.5 <= ttft["window_s"] < 2.5
    assert all(v is not None for v in ttft["ttft_p99_s"].values())
