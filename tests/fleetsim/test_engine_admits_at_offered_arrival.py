"""An engine queues requests from their offered arrival, not from when they reached it.

When fleetsim's event loop stalls (two shared cores, a 20x clock), the arrivals due
during the stall are released together and reach an engine together. Admitted when
they got there, they queue behind each other in the model: a burst the offered load
never had, which failed drills on TTFT p99. The router stamps each request with its
scheduled arrival; the engine admits it then.
"""

from __future__ import annotations

import asyncio

import pytest

from fleetsim.clock import ManualClock
from fleetsim.engine import MAX_ARRIVAL_AGE_S, Engine, EngineConfig, admission_time
from fleetsim.queueing import FifoServer, ServiceCurve

WARM_4_PER_S = ServiceCurve(4.0, 1.0, 0.0, ready_at=-100.0)
TOKEN_S = 0.05


def engine_on(clock: ManualClock) -> Engine:
    config = EngineConfig(
        model="m", warm_rate=4.0, cold_frac=0.25, warmup_s=120.0, tokens=2,
        token_interval_s=TOKEN_S,
    )  # fmt: skip
    return Engine(config, clock, ready_at=0.0, warm=True)


async def first_token_wait(engine: Engine, arrived_at: float | None) -> float:
    async for token in engine.generate(arrived_at=arrived_at):
        return token.queue_wait_s
    raise AssertionError("no token")


async def released_together(
    engine: Engine, clock: ManualClock, stamps: list[float | None]
) -> list[float]:
    """Every request reaches the engine at the same instant, in the order given."""
    tasks = [asyncio.create_task(first_token_wait(engine, s)) for s in stamps]
    await asyncio.sleep(0)
    await clock.advance(30.0)
    return list(await asyncio.gather(*tasks))


async def test_a_burst_released_together_queues_no_more_than_its_offered_rate_implies() -> None:
    # 10 requests offered 0.5 s apart (2 req/s on a 4 req/s engine) over the 5 s the loop
    # stalled for: as offered, none of them queues.
    clock = ManualClock(start=20.0)
    engine = engine_on(clock)
    stamps: list[float | None] = [15.0 + 0.5 * k for k in range(10)]

    waits = await released_together(engine, clock, stamps)

    assert waits == [0.0] * 10
    assert engine.stats.ttft_sum == pytest.approx(10 * TOKEN_S)


async def test_an_offered_rate_above_capacity_still_queues_as_offered() -> None:
    # 8 req/s offered to a 4 req/s engine: each request waits 1/4 - 1/8 s more than the last.
    clock = ManualClock(start=20.0)
    engine = engine_on(clock)

    waits = await released_together(engine, clock, [18.0 + k / 8 for k in range(8)])

    assert waits == pytest.approx([k / 8 for k in range(8)])


async def test_unstamped_requests_arrive_when_they_reach_the_engine() -> None:
    clock = ManualClock(start=20.0)
    engine = engine_on(clock)

    waits = await released_together(engine, clock, [None] * 4)

    assert waits == pytest.approx([0.0, 0.25, 0.5, 0.75])


async def test_a_burst_reaching_the_engine_in_reverse_order_still_does_not_queue() -> None:
    clock = ManualClock(start=20.0)
    engine = engine_on(clock)
    stamps: list[float | None] = [15.0 + 0.5 * k for k in reversed(range(10))]

    assert await released_together(engine, clock, stamps) == [0.0] * 10


async def test_a_stamp_from_the_future_is_admitted_now_and_queues_whoever_comes_next() -> None:
    clock = ManualClock(start=20.0)
    engine = engine_on(clock)

    waits = await released_together(engine, clock, [120.0, None])

    assert waits == pytest.approx([0.0, 0.25])


async def test_a_request_still_waits_out_the_part_of_its_modelled_queue_that_lies_ahead() -> None:
    # Stamped 0.1 s ago behind a queue 0.5 s deep: it starts 0.4 s from now, then takes
    # its first token's time; only the model's admission moved back, not the wall time.
    clock = ManualClock(start=20.0)
    engine = engine_on(clock)
    ahead = [asyncio.create_task(first_token_wait(engine, 19.9)) for _ in range(2)]
    await asyncio.sleep(0)
    late = asyncio.create_task(first_token_wait(engine, 19.9))
    await asyncio.sleep(0)

    await clock.advance(0.4 + TOKEN_S - 0.01)
    assert not late.done()
    await clock.advance(0.02)
    assert late.done() and await late == pytest.approx(0.5)
    await asyncio.gather(*ahead)


def test_admission_falls_back_to_now_and_clamps_stamps_into_the_engines_lifetime() -> None:
    assert admission_time(None, now=50.0, started_at=0.0) == 50.0
    assert admission_time(48.5, now=50.0, started_at=0.0) == 48.5
    assert admission_time(50.2, now=50.0, started_at=0.0) == 50.0
    assert admission_time(-1e9, now=50.0, started_at=0.0) == 50.0 - MAX_ARRIVAL_AGE_S
    # Sent before this engine process existed (a replacement that just came up).
    assert admission_time(45.0, now=50.0, started_at=49.0) == 49.0


def test_an_arrival_reaching_the_queue_late_takes_the_idle_place_it_would_have_had() -> None:
    s = FifoServer()
    assert s.admit(10.0, WARM_4_PER_S) == 10.0
    # Arrived at 9.0, while the server was idle; the request already placed keeps its start.
    assert s.admit(9.0, WARM_4_PER_S) == 9.0
    assert s.admit(10.0, WARM_4_PER_S) == 10.25


def test_a_late_arrival_with_no_whole_idle_place_queues_behind_from_its_own_arrival() -> None:
    s = FifoServer()
    s.admit(10.0, WARM_4_PER_S)
    # 0.1 s before the placed request is less than one 0.25 s service: no room in front.
    assert s.admit(9.9, WARM_4_PER_S) == pytest.approx(10.25)
    assert s.admit(10.0, WARM_4_PER_S) == pytest.approx(10.5)


def test_idle_places_fill_in_order_and_count_in_the_backlog() -> None:
    s = FifoServer()
    assert s.admit(10.0, WARM_4_PER_S) == 10.0
    # A one-second idle gap [9, 10) holds exactly four services.
    starts = [s.admit(9.0, WARM_4_PER_S) for _ in range(5)]
    assert starts == pytest.approx([9.0, 9.25, 9.5, 9.75, 10.25])
    assert s.backlog(9.0, WARM_4_PER_S) == pytest.approx(6.0)
    assert s.backlog(10.1, WARM_4_PER_S) == pytest.approx(1.6)


def test_idle_capacity_before_the_horizon_is_no_longer_offered() -> None:
    s = FifoServer()
    s.admit(10.0, WARM_4_PER_S)
    # The caller promised nothing arrives before 9.9 any more, so the idle time before
    # it is dropped; were an arrival at 9.0 to come anyway, it would queue at the tail.
    assert s.admit(9.0, WARM_4_PER_S, horizon=9.9) == pytest.approx(10.25)
