"""The benchmarks' pure helpers: the generated fleet, percentiles, the phase split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.history.v1 import MarkerRecordedEventAttributes

from bench.fleet_stack import (
    REPLICAS_PER_POOL,
    group_pools,
    many_pools_scenario,
    percentile,
    proc_memory_kib,
)
from bench.history_phases import Row, local_activity_row, median_phases, split_phases
from fleetsim.scenario import parse_scenario

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def test_the_generated_fleet_is_a_valid_scenario_with_every_group_in_its_own_namespaces() -> None:
    scenario = parse_scenario(many_pools_scenario("bench-x", {"deroute": 30, "floor": 1}))

    pools = {(ns.name, p.name) for ns in scenario.namespaces for p in ns.pools}
    expected = group_pools("deroute", 30) + group_pools("floor", 1)
    assert pools == {(r.namespace, r.pool) for r in expected}
    assert len({r.namespace for r in group_pools("deroute", 30)}) == 2
    gpus = sum(g.count * g.gpus for g in scenario.nodes)
    assert gpus >= 31 * REPLICAS_PER_POOL
    assert scenario.faults == [] and scenario.traffic == []


def test_a_fleet_without_pools_or_with_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one pool"):
        many_pools_scenario("bench-x", {"deroute": 0})
    with pytest.raises(ValueError, match="group 'storm': count must be >= 0, got -1"):
        many_pools_scenario("bench-x", {"storm": -1})


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]

    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 99) == 3.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_this_process_reports_a_resident_size_no_larger_than_its_peak() -> None:
    import os

    memory = proc_memory_kib(os.getpid())

    assert 0 < memory["VmRSS"] <= memory["VmHWM"]


def test_the_time_to_deroute_splits_into_intake_activities_and_the_rest() -> None:
    rows = [
        Row(1, "started", 100.05),
        Row(5, "scheduled", 100.10, activity="assess_loss"),
        Row(6, "activity-started", 100.12, scheduled_id=5),
        Row(7, "completed", 100.30, scheduled_id=5),
        Row(11, "scheduled", 100.40, activity="deroute_replica"),
        Row(12, "activity-started", 100.45, scheduled_id=11),
        Row(13, "completed", 100.90, scheduled_id=11),
        Row(17, "scheduled", 101.00, activity="protect"),
    ]

    phases = split_phases(rows, posted_at=100.0, out_at=100.60)

    assert phases["intake -> workflow started"] == pytest.approx(0.05)
    assert phases["activity assess_loss: queued"] == pytest.approx(0.02)
    assert phases["activity assess_loss: running"] == pytest.approx(0.18)
    # Still confirming when the endpoint left: counted up to that moment only.
    assert phases["activity deroute_replica: queued"] == pytest.approx(0.05)
    assert phases["activity deroute_replica: running"] == pytest.approx(0.15)
    assert "activity protect: queued" not in phases
    assert sum(phases.values()) == pytest.approx(0.60)


def test_an_incident_whose_history_never_started_is_all_intake() -> None:
    assert split_phases([], posted_at=10.0, out_at=10.5) == {
        "intake -> workflow started": pytest.approx(0.5)
    }


def test_median_phases_count_a_missing_phase_as_zero() -> None:
    splits = [{"a": 1.0, "b": 2.0}, {"a": 3.0}, {"a": 5.0, "b": 4.0}]

    assert median_phases(splits) == {"a": 3.0, "b": 2.0}


def test_local_activities_count_from_their_schedule_to_their_completion() -> None:
    rows = [
        Row(1, "started", 100.05),
        Row(4, "local", 100.25, activity="assess_loss", began=100.10),
        Row(5, "local", 100.30, activity="read_routing_state", began=100.25),
        Row(6, "scheduled", 100.32, activity="deroute_replica"),
        Row(9, "local", 101.50, activity="read_routing_state", began=101.40),
    ]

    phases = split_phases(rows, posted_at=100.0, out_at=100.40)

    assert phases["local activity assess_loss"] == pytest.approx(0.15)
    # Only the read before the endpoint left; a later one is not part of the time.
    assert phases["local activity read_routing_state"] == pytest.approx(0.05)
    # No started event yet (the history was read mid-attempt): all of it counts as running.
    assert phases["activity deroute_replica: running"] == pytest.approx(0.08)
    assert phases["activity deroute_replica: queued"] == 0
    assert sum(phases.values()) == pytest.approx(0.40)


def test_a_local_activity_marker_becomes_a_row_from_its_schedule_to_its_completion() -> None:
    history = json.loads((HISTORIES / "deroute_first.run1.json").read_text())
    markers = [
        (e["eventId"], e["markerRecordedEventAttributes"])
        for e in history["events"]
        if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"
    ]
    rows = []
    for event_id, attributes in markers:
        marker = MarkerRecordedEventAttributes()
        json_format.ParseDict(attributes, marker)
        row = local_activity_row(event_id, marker)
        if row is not None:
            rows.append(row)

    assert [r.activity for r in rows][:2] == ["assess_loss", "read_routing_state"]
    # Both times are the worker's wall clock (seconds since the epoch), a moment apart.
    assert all(r.kind == "local" and r.began > 1e9 and abs(r.at - r.began) < 60 for r in rows)
    # A patch marker is not an activity.
    assert len(rows) < len(markers)
