"""Warm-up before traffic: short, medium and concurrent shapes, then TTFT must have dropped."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from temporalio.testing import ActivityEnvironment

from activities.warmup import (
    WarmupActivities,
    WarmupInput,
    concurrent_service_rate,
    warmup_verdict,
)

from .conftest import MODEL, NS, POOL, FleetHandle, scenario

SIM_MODEL = MODEL  # the fleet serves the scenario's model name


@pytest.mark.parametrize(
    ("before", "after", "failures", "passed"),
    [
        (4.0, 0.3, 0, True),  # dropped, the HA article's unwarmed vs warmed figures
        (4.0, 2.0, 0, True),  # dropped by half, still above the warm figure
        (4.0, 3.5, 0, False),  # barely moved
        (0.2, 0.2, 0, True),  # already warm
        (4.0, 0.3, 1, False),  # a failed warm-up request
        (None, None, 0, False),
    ],
)
def test_a_replica_passes_warm_up_only_if_its_ttft_dropped(
    before: float | None, after: float | None, failures: int, passed: bool
) -> None:
    ok, reason = warmup_verdict(
        ttft_before_s=before,
        ttft_after_s=after,
        failures=failures,
        min_ttft_drop=0.3,
        warm_ttft_s=0.5,
    )
    assert ok is passed, reason


@pytest.mark.parametrize(
    ("offsets", "rate"),
    [
        # A FIFO replica at 2 req/s starts 8 requests 0.5 s apart: 7 gaps in 3.5 s (+ a token).
        ([0.05 + i * 0.5 for i in range(8)], 7 / 3.55),
        # One that batches them answers all at once: fast, however many it was sent.
        ([0.2] * 8, 7 / 0.2),
        # Answers in any order: the span is the last first token.
        ([3.0, 1.0, 2.0], 2 / 3.0),
        # Nothing to measure between.
        ([0.4], None),
        ([], None),
        ([0.0, 0.0], None),
    ],
)
def test_a_concurrent_batch_measures_the_rate_a_replica_starts_requests_at(
    offsets: list[float], rate: float | None
) -> None:
    assert concurrent_service_rate(offsets) == (None if rate is None else pytest.approx(rate))


def test_a_warm_spare_is_warmed_with_every_request_shape_and_passes(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    handle = fleet_factory(scenario(rate=0))
    spare = handle.ref(handle.pods(f"app={POOL},pool=warm")[0])

    result = ActivityEnvironment().run(
        WarmupActivities(handle.http).warm_up_replica, WarmupInput(replica=spare, model=SIM_MODEL)
    )

    assert result.passed, result.reason
    assert result.failures == 0
    assert result.shapes == {"probe": 2, "short": 3, "medium": 1, "concurrent": 8}
    assert result.requests_sent == 14
    assert result.ttft_after_s is not None and result.ttft_before_s is not None
    engine = next(rt.engine for rt in handle.fleet.kubelet.pods.values() if rt.name == spare.name)
    assert engine is not None and engine.stats.success >= 14
    # What it measured serving is never more than it serves (4 req/s at 10x: 40 per
    # wall second), so a probe share sized from it does not queue the replica.
    assert result.served_per_s is not None
    assert 0 < result.served_per_s <= engine.service_rate() * 10


def test_a_replica_that_fails_warm_up_is_reported_failed(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    handle = fleet_factory(scenario(rate=0))
    injected = handle.call(
        handle.fleet.inject,
        {
            "at": 0,
            "kind": "gpu-xid",
            "xid": 48,
            "target": {"namespace": NS, "pool": POOL, "replica": 0},
        },
    )
    name = injected.pods[0].split("/")[-1]
    broken = handle.ref(handle.store.get("pods", name, namespace=NS))

    result = ActivityEnvironment().run(
        WarmupActivities(handle.http).warm_up_replica, WarmupInput(replica=broken, model=SIM_MODEL)
    )

    assert not result.passed
    assert result.failures == result.requests_sent == 14
    assert "failed" in result.reason


def test_the_pools_label_safe_model_name_warms_the_replica_serving_the_real_name(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    real_name = "meta-llama/Llama-3.1-70B-Instruct"
    handle = fleet_factory(scenario(rate=0, model=real_name))
    spare = handle.ref(handle.pods(f"app={POOL},pool=warm")[0])
    label_form = handle.store.get("pods", spare.name, namespace=NS)["metadata"]["labels"]["model"]
    assert label_form == "meta-llama--Llama-3.1-70B-Instruct"

    result = ActivityEnvironment().run(
        WarmupActivities(handle.http).warm_up_replica, WarmupInput(replica=spare, model=label_form)
    )

    assert result.passed, result.reason
    assert result.failures == 0


def test_a_replica_serving_another_model_is_not_warmed_as_this_one(
    fleet_factory: Callable[..., FleetHandle],
) -> None:
    from temporalio.exceptions import ApplicationError

    handle = fleet_factory(scenario(rate=0))
    spare = handle.ref(handle.pods(f"app={POOL},pool=warm")[0])

    with pytest.raises(ApplicationError) as err:
        ActivityEnvironment().run(
            WarmupActivities(handle.http).warm_up_replica,
            WarmupInput(replica=spare, model="some-other-model"),
        )
    assert "not the pool's model 'some-other-model'" in str(err.value)
    assert err.value.non_retryable
