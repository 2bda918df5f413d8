"""What every worker-kill drill must show, read from a finished `ReadChaosDrill`.

Shared by the drill modules (`test_read_faults.py`, `drill_provision_kills.py`):
each kill struck as planned, the killed activity completed on a later attempt, the
timeline reports the retry, and fleetsim saw every stamped write once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.faults.read_chaos import ReadChaosDrill, ReadFault
from worker.attempts import NO_RESULT
from worker.drill import DrillResult
from workflows.types import IncidentStatus


def assert_killed_as_planned(drill: ReadChaosDrill, plan: list[ReadFault]) -> None:
    # The margin the polling had on each (seconds the activity had run when killed).
    print({k.fault.key: k.detail["running_for_s"] for k in drill.killed})
    assert drill.chaos_error is None
    assert drill.missed == []
    assert sorted(k.fault.key for k in drill.killed) == sorted(f.key for f in plan)
    assert all(k.detail["new_pid"] != k.detail["killed_pid"] for k in drill.killed)


def retried_attempts(drill: ReadChaosDrill, incident: str) -> dict[str, tuple[int, bool]]:
    """Each killed (non-local) activity's last attempt and whether it completed, by fault."""
    by_id = {a.activity_id: a for a in drill.activity_runs[incident]}
    return {
        k.fault.key: (by_id[k.activity_id].attempt, by_id[k.activity_id].completed)
        for k in drill.killed
        if k.activity_id
    }


def assert_each_completed_on_a_later_attempt(
    drill: ReadChaosDrill, incident: str, expected: set[str]
) -> None:
    retried = retried_attempts(drill, incident)
    assert set(retried) == expected
    assert {key: done for key, (_, done) in retried.items() if not done} == {}
    assert {key: n for key, (n, _) in retried.items() if n < 2} == {}


def timeline_retries(status: IncidentStatus) -> set[str]:
    """The activities the timeline reports retried after an attempt that never came back."""
    return {
        r["activity"]
        for entry in status.timeline
        for r in entry.evidence.get("retries", [])
        if r["failure"] == NO_RESULT
    }


def assert_each_write_applied_once(writes: dict[str, Any], result: DrillResult) -> None:
    """Counted by fleetsim's API server, then what the ledger's reconciliation says."""
    per_object: dict[str, int] = writes["by_op_id_and_object"]
    assert per_object, "no stamped write reached fleetsim"
    assert {k: n for k, n in per_object.items() if n != 1} == {}
    effects = result.effects
    assert (effects.duplicates, effects.orphans, effects.drift) == (0, 0, 0)
    assert result.duplicate_actions == 0


def assert_each_message_reached_the_channel_once(drill: ReadChaosDrill) -> None:
    """Counted by the drill's channel (the receiver), by the messages' Idempotency-Key."""
    channel = drill.held_channel
    receipts = Counter(channel.receipts)
    assert receipts and "" not in receipts, "every POST carries its Idempotency-Key"
    expected = {"drop": 1, "lose-reply": 2}
    # A dropped POST was never read: the retry's is its only receipt. A lost reply: the
    # retry saw no 2xx and posted again under the same key, which the channel kept once.
    assert {p.key: receipts[p.key] for p in channel.held} == {
        p.key: expected[p.mode] for p in channel.held
    }
    assert {key: n for key, n in receipts.items() if n > 1} == {
        p.key: 2 for p in channel.held if p.mode == "lose-reply"
    }
    milestones = [n.milestone for n in channel.received]
    assert sorted(milestones) == sorted(key.rsplit("/", 1)[-1] for key in receipts)
