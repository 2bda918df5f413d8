"""Protect: survivors' pressure from /metrics, thrash, the shedding tier at the gateway."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from temporalio.testing import ActivityEnvironment

from activities.config import ActivitySettings
from activities.effects import STAMP_ANNOTATION, EffectRunner
from activities.gateway import (
    TIER_FEATURE_OFF,
    TIER_MODEL_FALLBACK,
    TIER_NONE,
    TIER_PARAMETER_DEGRADE,
    TIER_QUEUE_429,
    AnnotationGateway,
    GatewayActivities,
    PressureSummary,
    ShedTierInput,
    choose_tier,
    fallback_target,
    tier_spec,
)
from activities.metrics import MetricsActivities, PressureInput

from .conftest import NS, POOL, FleetHandle, scenario

# ---------------------------------------------------------------------------- tier choice


@pytest.mark.parametrize(
    ("pressure", "current", "expected"),
    [
        (PressureSummary(healthy_replicas=7, lost_fraction=1 / 8), TIER_NONE, TIER_NONE),
        (
            PressureSummary(healthy_replicas=5, lost_fraction=3 / 8),
            TIER_NONE,
            TIER_PARAMETER_DEGRADE,
        ),
        (
            PressureSummary(healthy_replicas=7, waiting_per_replica=60),
            TIER_NONE,
            TIER_PARAMETER_DEGRADE,
        ),
        (
            PressureSummary(healthy_replicas=7, max_kv_cache_usage=0.97),
            TIER_NONE,
            TIER_MODEL_FALLBACK,
        ),
        (PressureSummary(healthy_replicas=7, ttft_p95_s=6.0), TIER_NONE, TIER_MODEL_FALLBACK),
        (PressureSummary(healthy_replicas=7, thrashing_replicas=2), TIER_NONE, TIER_QUEUE_429),
        (PressureSummary(healthy_replicas=0), TIER_NONE, TIER_FEATURE_OFF),
        # During the incident tiers only tighten: calm numbers keep the current tier.
        (PressureSummary(healthy_replicas=7), TIER_QUEUE_429, TIER_QUEUE_429),
    ],
)
def test_the_tier_follows_the_degradation_ladder_and_never_loosens(
    pressure: PressureSummary, current: int, expected: int
) -> None:
    decision = choose_tier(pressure, current_level=current)
    assert decision.level == expected
    assert decision.reasons or expected == TIER_NONE


def test_a_tier_above_the_automatic_limit_is_capped_and_says_it_needs_approval() -> None:
    decision = choose_tier(PressureSummary(healthy_replicas=0), max_level=TIER_MODEL_FALLBACK)
    assert (decision.level, decision.wanted_level, decision.capped) == (
        TIER_MODEL_FALLBACK,
        TIER_FEATURE_OFF,
        True,
    )
    assert any("approval" in r for r in decision.reasons)


def test_each_tier_keeps_the_measures_of_the_tiers_below_it() -> None:
    d2 = tier_spec(TIER_PARAMETER_DEGRADE)
    d4 = tier_spec(TIER_QUEUE_429, large_model="70b", small_model="8b", retry_after_s=7)
    assert (d2.max_tokens_factor, d2.stream, d2.fallback_to) == (0.5, False, None)
    assert (d4.max_tokens_factor, d4.stream) == (0.5, False)
    assert (d4.fallback_from, d4.fallback_to, d4.retry_after_s) == ("70b", "8b", 7)
    assert tier_spec(TIER_FEATURE_OFF).feature_enabled is False


def test_model_fallback_goes_large_to_small_and_never_sends_long_context_to_small() -> None:
    spec = tier_spec(
        TIER_MODEL_FALLBACK, large_model="70b", small_model="8b", small_model_context_tokens=8192
    )
    assert fallback_target(spec, "70b", prompt_tokens=1000) == "8b"
    assert fallback_target(spec, "70b", prompt_tokens=32000) == "70b"
    assert fallback_target(spec, "8b", prompt_tokens=10) == "8b"  # never small -> large


# ---------------------------------------------------------------------------- over HTTP


def _survivors(handle: FleetHandle) -> list:
    return [handle.ref(p) for p in handle.pods(f"app={POOL},pool=serving")]


def test_pressure_is_read_per_survivor_with_the_engine_generations_metric_names(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    # Light load (a tenth of capacity): numbers to read, no thrash to find.
    v1 = fleet_factory(scenario(version="0.11.0", rate=6, warm_rate=16))
    v0 = fleet_factory(scenario(version="0.9.2", core="V0", rate=6, warm_rate=16))

    new = ActivityEnvironment().run(
        MetricsActivities(v1.http).read_pressure,
        PressureInput(targets=_survivors(v1), sample_interval_s=0.5),
    )
    old = ActivityEnvironment().run(
        MetricsActivities(v0.http).read_pressure,
        PressureInput(targets=_survivors(v0), sample_interval_s=0.5),
    )

    for result, kv_name in ((new, "vllm:kv_cache_usage_perc"), (old, "vllm:gpu_cache_usage_perc")):
        assert len(result.replicas) == 4 and result.unreachable == []
        for r in result.replicas:
            assert r.waiting is not None and r.running is not None
            assert r.kv_cache_metric == kv_name and r.kv_cache_usage is not None
            assert r.preemptions_total is not None and r.preemption_rate is not None
        assert result.thrashing == []


def test_survivors_carrying_more_than_they_can_serve_are_detected_as_thrashing(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    handle = fleet_factory(scenario(replicas=2, warm=0, rate=60, warm_rate=2), speed=1.0)

    result = ActivityEnvironment().run(
        MetricsActivities(handle.http).read_pressure,
        PressureInput(targets=_survivors(handle), sample_interval_s=1.5),
    )

    assert result.thrashing, result
    hot = next(r for r in result.replicas if r.thrashing)
    assert hot.waiting_delta and hot.waiting_delta > 0
    assert hot.kv_cache_usage is not None and hot.kv_cache_usage >= 0.9
    assert hot.preemption_rate and hot.preemption_rate > 0
    assert len(hot.thrash_reasons) == 3


def test_a_dead_survivor_is_reported_unreachable_not_hidden(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    handle = fleet_factory(scenario(rate=0))
    targets = _survivors(handle)
    dead = targets[0].model_copy(update={"metrics_url": "http://127.0.0.1:9"})

    result = ActivityEnvironment().run(
        MetricsActivities(handle.http).read_pressure,
        PressureInput(targets=[dead, *targets[1:]], sample_interval_s=0.1),
    )

    assert result.unreachable == [dead.name]
    assert len(result.replicas) == 3


def test_the_shed_tier_is_applied_at_the_gateway_the_router_reads(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    gateway = AnnotationGateway(handle.api, ActivitySettings())
    acts = GatewayActivities(gateway, runner)
    op = ShedTierInput(
        op_id="i/protect/shed",
        incident_id="i",
        namespace=NS,
        pool=POOL,
        pressure=PressureSummary(healthy_replicas=3, max_kv_cache_usage=0.97, lost_fraction=0.25),
        max_level=TIER_MODEL_FALLBACK,
    )

    result = ActivityEnvironment().run(acts.apply_shed_tier, op)

    assert result.applied.level == TIER_MODEL_FALLBACK and result.applied_now
    assert result.previous.level == TIER_NONE and result.store_readable
    svc = handle.store.get("services", POOL, namespace=NS)
    notes = svc["metadata"]["annotations"]
    assert notes["gateway.fleetmend.io/shed-tier"] == str(TIER_MODEL_FALLBACK)
    assert notes[STAMP_ANNOTATION] == op.op_id
    assert handle.call(handle.fleet.router.table, NS, POOL).shed_tier == TIER_MODEL_FALLBACK

    again = ActivityEnvironment().run(acts.apply_shed_tier, op)
    assert again.applied.level == TIER_MODEL_FALLBACK and not again.applied_now
