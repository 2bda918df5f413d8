"""The alert storm's plan: exact counts, HA pairs, repeats and resolves, bad sizes refused."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from bench.storm_plan import ALERTNAMES, Notification, Target, rounds_for, storm_plan

STARTED = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TARGETS = [Target(f"storm-{i}", f"p{i:03d}", f"p{i:03d}-pod") for i in range(5)]


def plan(total: int = 400, seconds: float = 10.0) -> list[Notification]:
    return storm_plan(TARGETS, total_alerts=total, duration_s=seconds, started=STARTED)


def test_the_plan_carries_exactly_the_alerts_asked_for_within_the_duration() -> None:
    notes = plan()

    assert sum(n.alerts for n in notes) == 400
    assert all(0 <= n.at_s < 10.0 for n in notes)
    assert [n.at_s for n in notes] == sorted(n.at_s for n in notes)


def test_every_notification_is_sent_by_both_alertmanager_replicas_with_the_same_alerts() -> None:
    notes = plan()
    by_key: dict[tuple[str, int], list[list[dict[str, object]]]] = {}
    for n in notes:
        by_key.setdefault((n.target.pool, n.round), []).append(n.payload["alerts"])

    assert all(len(pair) == 2 and pair[0] == pair[1] for pair in by_key.values())
    assert {n.sender for n in notes} == {0, 1}


def test_each_pool_group_repeats_every_round_and_some_alerts_resolve_late() -> None:
    notes = plan()
    rounds = rounds_for(400, len(TARGETS), 2)
    per_pool = Counter(n.target.pool for n in notes)

    assert set(per_pool.values()) == {rounds * 2}
    first = [a["status"] for n in notes if n.round == 0 for a in n.payload["alerts"]]
    last = [a["status"] for n in notes if n.round == rounds - 1 for a in n.payload["alerts"]]
    assert set(first) == {"firing"}
    assert "resolved" in last and "firing" in last
    fingerprints = {a["fingerprint"] for n in notes for a in n.payload["alerts"]}
    assert len(fingerprints) == len(TARGETS) * len(ALERTNAMES)


def test_resolved_alerts_carry_an_end_time_and_firing_ones_do_not() -> None:
    for n in plan():
        for alert in n.payload["alerts"]:
            if alert["status"] == "resolved":
                assert alert["endsAt"] > alert["startsAt"]
            else:
                assert alert["endsAt"].startswith("0001-")


@pytest.mark.parametrize("total", [0, 39, 401, -40])
def test_a_total_that_does_not_fill_whole_rounds_is_refused_with_the_arithmetic(
    total: int,
) -> None:
    with pytest.raises(ValueError, match=r"multiple of pools \(5\) x senders \(2\)"):
        plan(total=total)


def test_a_duration_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="duration_s must be > 0"):
        plan(seconds=0)
