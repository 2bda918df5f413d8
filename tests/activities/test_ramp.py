"""Ramp: rate-weighted weights (the runbook's ramp_back.py figures), steps, hold, back-off."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest
from temporalio.testing import ActivityEnvironment

from activities.effects import STAMP_ANNOTATION, EffectRunner
from activities.gateway import AnnotationGateway
from activities.ramp import (
    RampActivities,
    RampInput,
    compute_ramp_weights,
    plan_ramp_step,
    rate_shares,
    shares_to_weights,
)

from .conftest import NS, POOL, FleetHandle, scenario

# ---------------------------------------------------------------------------- reference

WARM_RATE, COLD_FRAC, WARMUP_S, DEADLINE_S, WARM_REPLICAS = 20.0, 0.25, 120, 30.0, 3


def _rate_at(t: float, cold_frac: float, warm_s: float) -> float:
    if warm_s <= 0:
        return WARM_RATE
    return WARM_RATE * (cold_frac + (1 - cold_frac) * min(t, warm_s) / warm_s)


def _simulate(
    policy: str, cold_frac: float = COLD_FRAC, warm_s: float = WARMUP_S
) -> dict[str, float]:
    """The runbook's ramp_back.simulate, with the rate-weighted shares from rate_shares()."""
    arrival = WARM_RATE * WARM_REPLICAS
    names = [f"warm-{i}" for i in range(WARM_REPLICAS)] + ["new"]
    queues = dict.fromkeys(names, 0.0)
    late = served = peak_wait_new = 0.0
    for t in range(600):
        rates = dict.fromkeys(names[:-1], WARM_RATE) | {"new": _rate_at(t, cold_frac, warm_s)}
        if policy == "equal_on_ready":
            share = dict.fromkeys(names, 1.0 / len(names))
        else:
            share = rate_shares(rates)
        for name in names:
            r = rates[name]
            queues[name] = max(0.0, queues[name] + arrival * share[name] - r)
            wait = queues[name] / r
            if name == "new":
                peak_wait_new = max(peak_wait_new, wait)
            done = min(queues[name] + arrival * share[name], r)
            served += done
            if wait > DEADLINE_S:
                late += done
    return {"goodput": served - late, "late": late, "peak_wait_new": peak_wait_new}


def test_rate_weighted_shares_reproduce_the_runbooks_ramp_figures() -> None:
    equal = _simulate("equal_on_ready")
    ramp = _simulate("ramp_on_measured_rate")
    # ramp_back.py's printed output, lines 1 to 3.
    assert round(equal["peak_wait_new"]) == 31 and round(ramp["peak_wait_new"], 1) == 0.0
    assert round(equal["goodput"]) == 35682 and round(ramp["goodput"]) == 36000
    assert round(equal["late"]) == 313 and ramp["late"] == 0


def test_a_replica_that_starts_warm_makes_rate_weighting_and_equal_share_identical() -> None:
    equal = _simulate("equal_on_ready", cold_frac=1.0, warm_s=0)
    ramp = _simulate("ramp_on_measured_rate", cold_frac=1.0, warm_s=0)
    assert equal["goodput"] == ramp["goodput"] == 36000 and equal["late"] == 0


@pytest.mark.parametrize(
    ("rates", "expected"),
    [
        ({"a": 20, "b": 20, "c": 20, "new": 5}, {"a": 308, "b": 308, "c": 307, "new": 77}),
        ({"a": 1, "b": 1}, {"a": 500, "b": 500}),
        ({"a": 0, "b": 0}, {"a": 500, "b": 500}),
        ({"a": 1000, "b": 0.01}, {"a": 999, "b": 1}),
    ],
)
def test_weights_are_proportional_to_measured_rate_and_sum_to_the_total(
    rates: dict[str, float], expected: dict[str, int]
) -> None:
    weights = compute_ramp_weights(rates, total=1000)
    assert weights == expected
    assert sum(weights.values()) == 1000


def test_a_positive_share_never_rounds_to_zero_weight() -> None:
    assert shares_to_weights({"a": 0.9999, "b": 0.0001}, total=100) == {"a": 99, "b": 1}


def _plan(ttft: float | None, *, step: int, previous: float | None = None, warmed: bool = True):  # type: ignore[no-untyped-def]
    return plan_ramp_step(
        warm_rates={"a": 20.0, "b": 20.0},
        new_ttft_p99_s={"new": ttft},
        previous_credit={} if previous is None else {"new": previous},
        step=step,
        steps=4,
        ttft_slo_s=2.0,
        warmed={"new"} if warmed else set(),
    )


def test_a_healthy_new_replica_advances_toward_the_warm_rate_step_by_step() -> None:
    credits = [_plan(0.3, step=k).credited_rates["new"] for k in range(1, 5)]
    assert credits == [5.0, 10.0, 15.0, 20.0]
    final = _plan(0.3, step=4)
    assert final.actions == {"new": "advance"}
    assert final.credited_rates == {"a": 20.0, "b": 20.0, "new": 20.0}
    assert abs(final.weights["new"] - final.weights["a"]) <= 1


def test_ttft_near_the_slo_holds_and_over_the_slo_backs_off() -> None:
    hold = _plan(1.8, step=3, previous=10.0)
    back = _plan(2.5, step=3, previous=10.0)
    assert hold.actions == {"new": "hold"} and hold.credited_rates["new"] == 10.0
    assert back.actions == {"new": "back-off"} and back.credited_rates["new"] == 5.0
    assert back.weights["new"] < hold.weights["new"]


def test_a_replica_that_failed_warm_up_stays_at_the_probe_share() -> None:
    plan = _plan(0.1, step=4, warmed=False)
    assert plan.actions == {"new": "not-warmed"}
    share = plan.weights["new"] / sum(plan.weights.values())
    assert share == pytest.approx(0.02, abs=0.002)


# ---------------------------------------------------------------------------- over HTTP


def _cold_replacement(handle: FleetHandle) -> tuple[dict, list[dict]]:  # type: ignore[type-arg]
    """Scale the pool by one: the new replica goes ready cold, as a replacement does."""
    before = {p["metadata"]["name"] for p in handle.pods(f"app={POOL},pool=serving")}
    handle.call(
        lambda: handle.store.patch("deployments", POOL, {"spec": {"replicas": 5}}, namespace=NS)
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pods = handle.pods(f"app={POOL},pool=serving")
        new = [p for p in pods if p["metadata"]["name"] not in before]
        ready = [
            p
            for p in new
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
        ]
        if ready:
            return ready[0], [p for p in pods if p["metadata"]["name"] in before]
        time.sleep(0.1)
    raise AssertionError("the replacement never went ready")


def ramp_input(handle: FleetHandle, new: dict, warm: list[dict], *, steps: int) -> RampInput:  # type: ignore[type-arg]
    """A ramp of `new` beside `warm`, warmed, with short measurement windows."""
    return RampInput(
        op_id="i/ramp",
        incident_id="i",
        namespace=NS,
        warm_replicas=[handle.ref(p) for p in warm],
        new_replicas=[handle.ref(new)],
        warmed_pods=[new["metadata"]["name"]],
        steps=steps,
        step_interval_s=0.3,
    )


def _ramp(handle: FleetHandle, runner: EffectRunner, *, warmed: bool, steps: int = 3):  # type: ignore[no-untyped-def]
    new, warm = _cold_replacement(handle)
    return new, ActivityEnvironment().run(
        RampActivities(AnnotationGateway(handle.api), handle.http, runner).ramp_traffic,
        RampInput(
            op_id="i/ramp",
            incident_id="i",
            namespace=NS,
            warm_replicas=[handle.ref(p) for p in warm],
            new_replicas=[handle.ref(new)],
            warmed_pods=[new["metadata"]["name"]] if warmed else [],
            steps=steps,
            step_interval_s=0.5,
            ttft_slo_s=2.0,
        ),
    )


def test_the_ramp_applies_rate_weights_in_steps_and_finishes_when_ttft_holds(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    # The replacement is headroom (the runbook's model): the warm replicas carry the load.
    handle = fleet_factory(scenario(rate=8, warm_rate=16))

    new, result = _ramp(handle, runner, warmed=True)

    name = new["metadata"]["name"]
    shares = [r.weights[name] / sum(r.weights.values()) for r in result.steps]
    assert len(result.steps) >= 3
    assert shares == sorted(shares) and shares[0] < shares[-1]
    assert all(r.actions[name] == "advance" for r in result.steps)
    assert all(all(v is not None for v in r.rates.values()) for r in result.steps)
    assert result.completed and not result.keep_shedding
    for pod, weight in result.final_weights.items():
        stored = handle.store.get("pods", pod, namespace=NS)["metadata"]["annotations"]
        assert stored["router.fleetmend.io/weight"] == str(weight)
        assert stored[STAMP_ANNOTATION].startswith("i/ramp/step-")
    table = handle.call(handle.fleet.router.table, NS, POOL)
    assert {e.pod: int(e.weight) for e in table.endpoints} == result.final_weights


def test_a_replica_that_failed_warm_up_is_not_ramped_and_shedding_stays(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=8, warm_rate=16))

    new, result = _ramp(handle, runner, warmed=False, steps=2)

    name = new["metadata"]["name"]
    assert all(r.actions[name] == "not-warmed" for r in result.steps)
    assert result.final_weights[name] <= 0.03 * sum(result.final_weights.values())
    assert result.keep_shedding and name in result.held_back


def test_a_retried_ramp_resumes_from_its_heartbeat_instead_of_starting_over(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=8, warm_rate=16))
    new, warm = _cold_replacement(handle)
    op = ramp_input(handle, new, warm, steps=3)
    beats: list[dict] = []  # type: ignore[type-arg]
    first = ActivityEnvironment()
    # Every heartbeat carries the progress: Temporal keeps only the last one.
    first.on_heartbeat = lambda *details: beats.append(details[0] if details else {})
    first.run(RampActivities(AnnotationGateway(handle.api), handle.http, runner).ramp_traffic, op)
    assert beats and all(isinstance(b, dict) and "records" in b for b in beats)
    after_one_step = next(b for b in beats if len(b["records"]) == 1)

    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, heartbeat_details=[after_one_step])
    resumed = retry.run(
        RampActivities(AnnotationGateway(handle.api), handle.http, runner).ramp_traffic, op
    )

    assert resumed.steps[0].model_dump() == after_one_step["records"][0]
    assert resumed.previous_weights == after_one_step["previous"]
    step_ops = [r for r in runner.ledger.operations("i") if r.op_id.startswith("i/ramp/step-")]
    # Every step applied once, across both attempts.
    assert len({r.op_id for r in step_ops}) == len(step_ops)
    assert all(r.state in ("applied", "confirmed") for r in step_ops)


def test_warm_replicas_measured_unevenly_keep_even_shares() -> None:
    # Each warm replica served what it was sent: 3, 3.6 and 1.5 req/s are the shares of the
    # last step plus noise, not three capacities. Credited as such, the noise would compound.
    plan = plan_ramp_step(
        warm_rates={"a": 3.0, "b": 3.6, "c": 1.5},
        new_ttft_p99_s={"new": 0.3},
        previous_credit={"new": 1.0},
        step=5,
        steps=5,
        ttft_slo_s=2.0,
        warmed={"new"},
    )
    assert plan.credited_rates == pytest.approx({"a": 2.7, "b": 2.7, "c": 2.7, "new": 2.7})
    assert max(plan.weights.values()) - min(plan.weights.values()) <= 1
