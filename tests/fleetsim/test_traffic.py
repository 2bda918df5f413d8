"""The traffic generator offers the scenario's rate even when its sleeps overrun."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from fleetsim.router import Router, TrafficRequest
from fleetsim.scenario import Traffic
from fleetsim.traffic import TrafficGenerator


class OverrunningClock:
    """Every sleep ends `overrun_s` late, as on a busy event loop under a fast clock."""

    def __init__(self, overrun_s: float) -> None:
        self.overrun_s = overrun_s
        self._now = 0.0

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        self._now += max(0.0, seconds) + self.overrun_s
        await asyncio.sleep(0)


class CountingRouter:
    def __init__(self, clock: OverrunningClock | None = None) -> None:
        self.arrivals = 0
        self.clock = clock
        # (stamped arrival, fleet time the router got it), in the order received.
        self.received: list[tuple[float | None, float]] = []

    async def handle(self, req: TrafficRequest) -> str:
        self.arrivals += 1
        if self.clock is not None:
            self.received.append((req.arrived_at, self.clock.now()))
        return "served"


async def offered(
    rate: float, seconds: float, overrun_s: float, arrivals: str = "exact"
) -> tuple[int, float, int]:
    """Arrivals over `seconds` of clock time, the worst release lag and the arrivals dropped."""
    clock = OverrunningClock(overrun_s)
    router = CountingRouter()
    spec = Traffic.model_validate(
        {"namespace": "serving", "pool": "llm", "rate": rate, "arrivals": arrivals}
    )
    gen = TrafficGenerator(spec, cast(Router, router), clock, seed=7)
    gen.start()
    while clock.now() < seconds:
        await asyncio.sleep(0)
    await gen.stop()
    return router.arrivals, gen.max_lag_s, gen.dropped


async def test_overrunning_sleeps_delay_arrivals_but_do_not_drop_them() -> None:
    # 4 ms of fleet time per sleep is 1 ms of wall time at speed 4; the gaps at 60 req/s
    # average 16.7 ms, so a generator that slept gap by gap would lose about a fifth.
    exact, no_lag, none = await offered(60.0, 100.0, overrun_s=0.0)
    late, _, dropped = await offered(60.0, 100.0, overrun_s=0.004)
    assert abs(exact - 6000) < 300 and no_lag == 0.0 and none == 0
    assert abs(late - exact) < 0.02 * exact and dropped == 0


async def test_a_sleep_overrun_longer_than_many_gaps_releases_the_arrivals_and_says_how_late() -> (
    None
):
    arrivals, lag, dropped = await offered(60.0, 100.0, overrun_s=0.5)
    assert abs(arrivals - 6000) < 300 and dropped == 0
    assert 0.4 < lag <= 0.5 + 1e-9


async def test_a_fleet_that_cannot_keep_up_drops_the_overdue_arrivals_and_counts_them() -> None:
    # Each sleep overruns by 5 s: catching up on that would never end.
    arrivals, lag, dropped = await offered(60.0, 100.0, overrun_s=5.0)
    assert lag <= 2.0
    assert dropped > arrivals
    assert abs(arrivals + dropped - 6000) < 300


async def test_paced_arrivals_lose_each_overrun_as_the_ci_drills_expect() -> None:
    paced, _, dropped = await offered(60.0, 100.0, overrun_s=0.004, arrivals="paced")
    assert paced < 0.9 * 6000 and dropped == 0


async def test_arrivals_released_together_are_stamped_with_their_scheduled_times() -> None:
    clock = OverrunningClock(overrun_s=0.5)
    router = CountingRouter(clock)
    spec = Traffic.model_validate(
        {"namespace": "serving", "pool": "llm", "rate": 60.0, "arrivals": "exact"}
    )
    gen = TrafficGenerator(spec, cast(Router, router), clock, seed=7)
    gen.start()
    while clock.now() < 50.0:
        await asyncio.sleep(0)
    await gen.stop()

    stamps = [stamp for stamp, _ in router.received if stamp is not None]
    released_at = {at for _, at in router.received}
    assert len(stamps) == len(router.received) > 2000
    # Released in bursts, one per overrun sleep, yet stamped at 60 req/s apart, in order,
    # never later than released (a stamp ahead by less than a tick is the engine's to clamp).
    assert len(released_at) < len(stamps) / 10
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert (stamps[-1] - stamps[0]) / (len(stamps) - 1) == pytest.approx(1 / 60, rel=0.05)
    assert all(stamp <= at + 0.01 for stamp, at in router.received if stamp is not None)
