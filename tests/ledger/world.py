"""The outside world for the ledger tests: effects counted in tables the ledger never reads.

`effect_log` gets one row per effect actually performed; `apply_calls` one row per call of
an apply callable. The counts are the tests' own, independent of what the ledger says.
`fake_objects` stands in for Kubernetes objects: a label change and the op-id stamp
annotation are written together, as one PATCH would write them.

The process entry points (`race_in_process`, `apply_then_die`) are module-level so that
multiprocessing's spawn start method can import them.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, create_engine, text

from ledger.store import Ledger

STAMP = "fleetmend.io/op-id"

SCHEMA = [
    """CREATE TABLE effect_log (
        seq bigserial PRIMARY KEY, op_id text NOT NULL, pid int NOT NULL,
        thread text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    """CREATE TABLE apply_calls (
        seq bigserial PRIMARY KEY, op_id text NOT NULL, pid int NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    """CREATE TABLE fake_objects (
        name text PRIMARY KEY, labels jsonb NOT NULL DEFAULT '{}',
        annotations jsonb NOT NULL DEFAULT '{}')""",
]


def create_world(engine: Engine, objects: tuple[str, ...] = ()) -> None:
    with engine.begin() as conn:
        for statement in SCHEMA:
            conn.execute(text(statement))
        for name in objects:
            conn.execute(text("INSERT INTO fake_objects (name) VALUES (:n)"), {"n": name})


def counts(engine: Engine, table: str) -> dict[str, int]:
    """op_id -> rows in `table` (effect_log or apply_calls)."""
    assert table in ("effect_log", "apply_calls")
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT op_id, count(*) FROM {table} GROUP BY op_id")).all()
    return {op_id: n for op_id, n in rows}


class CountingEffect:
    """Not idempotent on purpose: every call is one more effect, so only the ledger guards it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def apply(self, op_id: str) -> dict[str, Any]:
        with self.engine.begin() as conn:
            seq = conn.execute(
                text(
                    "INSERT INTO effect_log (op_id, pid, thread) VALUES (:op, :pid, :thread) "
                    "RETURNING seq"
                ),
                {"op": op_id, "pid": os.getpid(), "thread": threading.current_thread().name},
            ).scalar_one()
        return {"seq": seq, "pid": os.getpid()}

    def confirm(self, op_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            seen = conn.execute(
                text("SELECT count(*) FROM effect_log WHERE op_id = :op"), {"op": op_id}
            ).scalar_one()
        return {"effects": seen} if seen else None


class StampedLabelEffect:
    """Set a label on a fake object, stamping the op id in the same write; check the stamp first.

    This is how fleetmend's Kubernetes effects close the applied-not-recorded window.
    `die_after_effect` SIGKILLs the process right after the effect is durable: the ledger
    never hears of it.
    """

    def __init__(
        self,
        engine: Engine,
        name: str,
        labels: Mapping[str, str],
        *,
        die_after_effect: bool = False,
    ) -> None:
        self.engine = engine
        self.name = name
        self.labels = dict(labels)
        self.die_after_effect = die_after_effect

    def apply(self, op_id: str) -> dict[str, Any]:
        with self.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO apply_calls (op_id, pid) VALUES (:op, :pid)"),
                {"op": op_id, "pid": os.getpid()},
            )
        with self.engine.begin() as conn:
            obj = conn.execute(
                text("SELECT labels, annotations FROM fake_objects WHERE name = :n FOR UPDATE"),
                {"n": self.name},
            ).one()
            if obj.annotations.get(STAMP) != op_id:
                conn.execute(
                    text(
                        "UPDATE fake_objects SET labels = labels || CAST(:labels AS jsonb), "
                        "annotations = annotations || jsonb_build_object(CAST(:k AS text), "
                        "CAST(:op AS text)) WHERE name = :n"
                    ),
                    {"labels": _json(self.labels), "k": STAMP, "op": op_id, "n": self.name},
                )
                conn.execute(
                    text("INSERT INTO effect_log (op_id, pid, thread) VALUES (:op, :pid, 'main')"),
                    {"op": op_id, "pid": os.getpid()},
                )
        if self.die_after_effect:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.observe()

    def observe(self) -> dict[str, Any]:
        with self.engine.connect() as conn:
            obj = conn.execute(
                text("SELECT labels, annotations FROM fake_objects WHERE name = :n"),
                {"n": self.name},
            ).one()
        return {"labels": obj.labels, "annotations": obj.annotations}

    def confirm(self, op_id: str) -> dict[str, Any] | None:
        observed = self.observe()
        return observed if observed["annotations"].get(STAMP) == op_id else None


def _json(value: Mapping[str, Any]) -> str:
    import json

    return json.dumps(value)


def race(
    ledger: Ledger,
    effect: CountingEffect,
    op_ids: list[str],
    incident_id: str,
    threads: int,
    go: Any,
    *,
    same_order: bool = False,
) -> tuple[int, int, int]:
    """`threads` threads each run every op id; return (calls, applied_now, waited).

    `same_order`: all threads walk the list in the same order, arriving at every op id
    together (the most contention). Otherwise each thread shuffles its own order.
    """
    applied = [0] * threads
    waited = [0] * threads
    errors: list[BaseException] = []

    def racer(index: int) -> None:
        order = list(op_ids)
        if not same_order:
            random.Random(f"{os.getpid()}-{index}").shuffle(order)
        go.wait()
        try:
            for op_id in order:
                outcome = ledger.run_once(
                    {
                        "op_id": op_id,
                        "incident_id": incident_id,
                        "kind": "label-pod",
                        "target": f"serving/pod/{op_id.rsplit('/', 1)[-1]}",
                        "intent": {"labels": {"serving": "false"}},
                    },
                    effect.apply,
                    effect.confirm,
                )
                applied[index] += outcome.applied_now
                waited[index] += outcome.waited
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=racer, args=(i,), name=f"racer-{os.getpid()}-{i}")
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return threads * len(op_ids), sum(applied), sum(waited)


def race_in_process(
    database_url: str,
    op_ids: list[str],
    incident_id: str,
    threads: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Spawned process: a ledger and engine of its own, `threads` racers, report to `results`."""
    engine = create_engine(database_url, pool_size=threads, max_overflow=threads)
    ledger = Ledger(engine, wait=120)
    try:
        ready.release()
        report = race(ledger, CountingEffect(engine), op_ids, incident_id, threads, go)
        results.put(("ok", os.getpid(), report))
    except BaseException as exc:
        results.put(("error", os.getpid(), repr(exc)))
    finally:
        engine.dispose()


def apply_then_die(database_url: str, spec: dict[str, Any], lease: float) -> None:
    """Spawned process: claim and apply the operation, then get SIGKILLed before recording."""
    engine = create_engine(database_url)
    ledger = Ledger(engine, lease=lease)
    effect = StampedLabelEffect(engine, "llm-0", spec["intent"]["labels"], die_after_effect=True)
    ledger.run_once(spec, effect.apply)
    raise AssertionError("unreachable: apply kills this process")
