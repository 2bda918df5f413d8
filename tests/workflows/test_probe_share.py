"""The probe share a cold replica is held at: what it measurably serves, between a floor
and the configured share (`workflows.decisions.probe_share_from_rate`)."""

from __future__ import annotations

import pytest

from workflows.decisions import probe_floor, probe_share_from_rate, probe_weight


@pytest.mark.parametrize(
    ("served", "pool", "share", "bound"),
    [
        # ramp_back.py's warm replica (20 req/s of 60): 80% of it is 26.7%, capped at 10%.
        (20.0, 60.0, 0.10, "ceiling"),
        # Its 25%-cold replacement (5 of 60): 6.7%, under the configured 10%.
        (5.0, 60.0, 0.8 * 5 / 60, "measured"),
        # The colder drill's 10%-cold replacement (1 of 30 req/s): 2.7%.
        (1.0, 30.0, 0.8 * 1 / 30, "measured"),
        # 5% cold at an eighth of the rates (0.125 of 7.5): 1.3%.
        (0.125, 7.5, 0.8 * 0.125 / 7.5, "measured"),
        # Slower than the floor allows for: the floor, so it still gets requests to measure.
        (0.05, 60.0, 0.01, "floor"),
        # Exactly at the ceiling: the ceiling.
        (12.5, 100.0, 0.10, "ceiling"),
        # Nothing measured, on either side: the floor.
        (None, 60.0, 0.01, "floor"),
        (0.0, 60.0, 0.01, "floor"),
        (5.0, None, 0.01, "floor"),
        (5.0, 0.0, 0.01, "floor"),
    ],
)
def test_a_probe_share_offers_a_replica_at_most_headroom_of_what_it_serves_between_floor_and_ceiling(
    served: float | None, pool: float | None, share: float, bound: str
) -> None:
    chosen = probe_share_from_rate(
        ceiling=0.1, floor=0.01, served_per_s=served, pool_per_s=pool, headroom=0.8
    )
    assert chosen.share == pytest.approx(share)
    assert chosen.bound == bound
    if bound == "measured" and served is not None and pool is not None:
        # The point of it: the rate it is offered stays under what it serves.
        assert chosen.share * pool <= 0.8 * served + 1e-9


def test_the_reason_names_the_rates_and_the_limit_that_set_the_share() -> None:
    measured = probe_share_from_rate(ceiling=0.1, floor=0.01, served_per_s=1.0, pool_per_s=30.0)
    assert "serves 1.00 req/s of the pool's 30.00" in measured.reason
    assert "under the configured probe share of 10.0%" in measured.reason
    capped = probe_share_from_rate(ceiling=0.1, floor=0.01, served_per_s=20.0, pool_per_s=60.0)
    assert "capped at the configured probe share of 10.0%" in capped.reason
    floor = probe_share_from_rate(ceiling=0.1, floor=0.01, served_per_s=None, pool_per_s=60.0)
    assert floor.reason == "no service rate measured: the floor share of 1.0%"


def test_a_measured_share_is_a_router_weight_of_at_least_one() -> None:
    tiny = probe_share_from_rate(ceiling=0.1, floor=0.0001, served_per_s=0.01, pool_per_s=1000)
    assert tiny.bound == "floor"
    assert probe_weight(tiny.share) == 1


@pytest.mark.parametrize(
    ("ceiling", "floor", "headroom", "named"),
    [
        (0.1, 0.2, 0.8, "floor=0.2 and ceiling=0.1"),
        (0.1, 0.0, 0.8, "floor=0.0"),
        (1.5, 0.01, 0.8, "ceiling=1.5"),
        (0.1, 0.01, 0.0, "headroom must be in (0, 1], got 0.0"),
        (0.1, 0.01, 1.2, "headroom must be in (0, 1], got 1.2"),
    ],
)
def test_bounds_that_cannot_hold_a_share_are_refused_by_name(
    ceiling: float, floor: float, headroom: float, named: str
) -> None:
    with pytest.raises(ValueError, match="probe share") as err:
        probe_share_from_rate(
            ceiling=ceiling, floor=floor, served_per_s=1.0, pool_per_s=10.0, headroom=headroom
        )
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("pool", "window", "floor"),
    [
        # 60 req/s over a 30 s window: 1% is 18 requests, more than the 5 a probe needs.
        (60.0, 30.0, 0.01),
        # A quiet pool (2 req/s): 1% of 60 s is 1.2 requests; 5 need 4.2% of it.
        (2.0, 60.0, 5 / 120),
        # Nothing measured, or no window: the configured floor.
        (None, 30.0, 0.01),
        (0.0, 30.0, 0.01),
        (60.0, 0.0, 0.01),
    ],
)
def test_the_floor_rises_until_a_probe_window_sees_its_requests(
    pool: float | None, window: float, floor: float
) -> None:
    assert probe_floor(0.01, pool_per_s=pool, window_s=window, min_requests=5) == pytest.approx(
        floor
    )
