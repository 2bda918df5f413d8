"""A worker SIGKILLed between performing an effect and recording it: the retry does not repeat it.

The child process claims the operation, applies it (label + op-id stamp, written together
like one Kubernetes PATCH) and is killed before the ledger hears of it: the ledger row
stays `proposed`, the effect is in the world. The next attempt waits out the dead
worker's lease, claims the operation again, and then either finds the effect through
`confirm` (and never calls apply), or calls the stamped apply, which sees its own op id
on the object and does nothing.
"""

from __future__ import annotations

import multiprocessing
import signal

import pytest
from sqlalchemy import Engine

from ledger.store import Ledger
from tests.ledger.world import StampedLabelEffect, counts, create_world

OP = "replica-loss/serving/pool-a/deroute/serving/pod/llm-0"
SPEC = {
    "op_id": OP,
    "incident_id": "replica-loss/serving/pool-a",
    "kind": "label-pod",
    "target": "serving/pod/llm-0",
    "intent": {"labels": {"serving": "false"}},
}
LEASE = 0.5


@pytest.fixture
def crashed(db_engine: Engine, database_url: str) -> Ledger:
    """A ledger whose only operation was applied by a worker that died before recording it."""
    from tests.ledger.world import apply_then_die

    create_world(db_engine, objects=("llm-0",))
    child = multiprocessing.get_context("spawn").Process(
        target=apply_then_die, args=(database_url, SPEC, LEASE)
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    ledger = Ledger(db_engine, wait=30)
    record = ledger.get(OP)
    assert record is not None
    assert (record.state, record.attempts, record.applied_at) == ("proposed", 1, None)
    assert counts(db_engine, "effect_log") == {OP: 1}, "the effect happened before the kill"
    return ledger


def test_retry_after_crash_between_apply_and_record_does_not_apply_twice(
    crashed: Ledger, db_engine: Engine
) -> None:
    effect = StampedLabelEffect(db_engine, "llm-0", {"serving": "false"})

    outcome = crashed.run_once(SPEC, effect.apply)

    # The ledger alone cannot know the effect happened: it called apply a second time...
    assert counts(db_engine, "apply_calls") == {OP: 2}
    # ...and the stamp made that second call a no-op: one effect in the world.
    assert counts(db_engine, "effect_log") == {OP: 1}
    assert outcome.applied_now
    assert (outcome.state, outcome.record.attempts) == ("applied", 2)
    assert outcome.record.result == {
        "labels": {"serving": "false"},
        "annotations": {"fleetmend.io/op-id": OP},
    }


def test_retry_after_crash_between_apply_and_record_confirms_from_the_stamp_without_applying(
    crashed: Ledger, db_engine: Engine
) -> None:
    effect = StampedLabelEffect(db_engine, "llm-0", {"serving": "false"})

    outcome = crashed.run_once(SPEC, effect.apply, effect.confirm)

    assert counts(db_engine, "apply_calls") == {OP: 1}, "only the dead worker called apply"
    assert counts(db_engine, "effect_log") == {OP: 1}
    assert outcome.recovered and not outcome.applied_now
    assert (outcome.state, outcome.record.attempts) == ("confirmed", 2)
    assert outcome.record.evidence == {
        "labels": {"serving": "false"},
        "annotations": {"fleetmend.io/op-id": OP},
    }
    assert outcome.record.applied_at is not None
