"""A simulated engine reports the model's queue wait and TTFT, not the simulator's lag.

At 20x on two busy cores a 50 ms stall of the event loop is a second of fleet time. A
real engine would not add that to every request in flight, so fleetsim's must not
either: verification judges TTFT p99 from these histograms.
"""

from __future__ import annotations

import asyncio

import pytest

from fleetsim.clock import ManualClock
from fleetsim.engine import Engine, EngineConfig


class StallingClock(ManualClock):
    """Every wake-up comes `stall_s` of fleet time late, as on an overloaded machine."""

    def __init__(self, stall_s: float) -> None:
        super().__init__()
        self.stall_s = stall_s

    async def sleep(self, seconds: float) -> None:
        self._now += max(0.0, seconds) + self.stall_s
        await asyncio.sleep(0)


def engine_on(clock: ManualClock, *, token_interval_s: float = 0.05) -> Engine:
    config = EngineConfig(
        model="m",
        warm_rate=4.0,
        cold_frac=0.25,
        warmup_s=120.0,
        tokens=4,
        token_interval_s=token_interval_s,
    )
    return Engine(config, clock, ready_at=clock.now(), warm=True)


async def serve(engine: Engine, requests: int) -> list[float]:
    waits = []
    for _ in range(requests):
        async for token in engine.generate():
            if token.index == 0:
                waits.append(token.queue_wait_s)
    return waits


async def test_a_stalled_simulator_adds_nothing_to_the_ttft_the_engine_reports() -> None:
    clock = StallingClock(stall_s=1.0)
    engine = engine_on(clock)

    waits = await serve(engine, 3)

    assert clock.now() > 10.0, "the stalls did happen"
    assert engine.stats.ttft_count == 3
    assert engine.stats.ttft_sum == pytest.approx(3 * 0.05)
    assert waits == pytest.approx([0.0, 0.0, 0.0])


async def test_a_queued_request_reports_its_modelled_wait_plus_the_first_token() -> None:
    clock = ManualClock()
    engine = engine_on(clock)
    # Two requests at once on a 4 req/s engine: the second starts a quarter second later.
    first = asyncio.create_task(serve(engine, 1))
    second = asyncio.create_task(serve(engine, 1))
    await asyncio.sleep(0)
    await clock.advance(5.0)

    assert sorted([*(await first), *(await second)]) == pytest.approx([0.0, 0.25])
    assert engine.stats.ttft_sum == pytest.approx(0.05 + 0.30)
