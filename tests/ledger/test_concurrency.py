"""Racing workers apply each effect exactly once, counted by the test, not by the ledger.

The apply callable here is deliberately NOT idempotent (every call inserts one more
row into `effect_log`), so the count is exactly what the ledger let through.
"""

from __future__ import annotations

import multiprocessing
import threading

from sqlalchemy import Engine, text

from ledger.store import Ledger
from tests.ledger.world import CountingEffect, counts, create_world, race, race_in_process


def _op_ids(n: int) -> list[str]:
    return [f"replica-loss/serving/pool-a/deroute/llm-{i}" for i in range(n)]


def _ledger_states(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT state, count(*) FROM operations GROUP BY state")).all()
    return {state: n for state, n in rows}


def test_4_processes_with_32_threads_racing_the_same_1000_operations_apply_each_effect_once(
    db_engine: Engine, database_url: str
) -> None:
    create_world(db_engine)
    op_ids = _op_ids(1000)
    spawn = multiprocessing.get_context("spawn")
    ready, go, results = spawn.Semaphore(0), spawn.Event(), spawn.Queue()
    processes = [
        spawn.Process(
            target=race_in_process,
            args=(database_url, op_ids, "inc-race", 8, ready, go, results),
        )
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        assert ready.acquire(timeout=120), "a racer process did not start"
    go.set()
    reports = [results.get(timeout=280) for _ in processes]
    for process in processes:
        process.join(timeout=30)

    assert [status for status, _, _ in reports] == ["ok"] * 4, reports
    calls = sum(report[0] for _, _, report in reports)
    applied_now = sum(report[1] for _, _, report in reports)
    effects = counts(db_engine, "effect_log")
    assert calls == 4 * 8 * 1000
    assert sorted(effects) == sorted(op_ids)
    assert set(effects.values()) == {1}, "an effect was applied more than once"
    assert applied_now == 1000
    with db_engine.connect() as conn:
        appliers = conn.execute(text("SELECT count(DISTINCT pid) FROM effect_log")).scalar_one()
    assert appliers >= 2, "the effects should be spread over the racing processes"
    assert _ledger_states(db_engine) == {"confirmed": 1000}


def test_32_threads_in_one_process_racing_the_same_1000_operations_apply_each_effect_once(
    db_engine: Engine,
) -> None:
    create_world(db_engine)
    op_ids = _op_ids(1000)
    go = threading.Event()
    threading.Timer(0.05, go.set).start()

    calls, applied_now, _ = race(
        Ledger(db_engine, wait=120), CountingEffect(db_engine), op_ids, "inc-threads", 32, go
    )

    effects = counts(db_engine, "effect_log")
    assert calls == 32 * 1000
    assert sorted(effects) == sorted(op_ids)
    assert set(effects.values()) == {1}, "an effect was applied more than once"
    assert applied_now == 1000
    assert _ledger_states(db_engine) == {"confirmed": 1000}


def test_32_threads_arriving_together_at_each_operation_apply_it_once(db_engine: Engine) -> None:
    create_world(db_engine)
    op_ids = _op_ids(50)
    go = threading.Event()
    threading.Timer(0.05, go.set).start()

    calls, applied_now, waited = race(
        Ledger(db_engine, wait=120),
        CountingEffect(db_engine),
        op_ids,
        "inc-lockstep",
        threads=32,
        go=go,
        same_order=True,
    )

    effects = counts(db_engine, "effect_log")
    assert calls == 32 * 50
    assert sorted(effects) == sorted(op_ids)
    assert set(effects.values()) == {1}, "an effect was applied more than once"
    assert applied_now == 50
    assert waited > 0, "the racers should have met another racer's live claim"
    assert _ledger_states(db_engine) == {"confirmed": 50}
