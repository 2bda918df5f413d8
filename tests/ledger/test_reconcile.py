"""Reconciliation finds duplicates, orphans and drift, and reports each row once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from ledger.reconcile import find_orphans, findings, reconcile, start_run
from ledger.store import Ledger

INCIDENT = "replica-loss/serving/pool-a"


def spec(op: str, kind: str, target: str, **extra: Any) -> dict[str, Any]:
    base = {"op_id": f"{INCIDENT}/{op}", "incident_id": INCIDENT, "kind": kind, "target": target}
    return base | extra


def done(op_id: str) -> dict[str, Any]:
    return {"ok": op_id}


@pytest.fixture
def ledger(db_engine: Engine) -> Ledger:
    return Ledger(db_engine, lease=30, wait=1)


def test_two_applied_cordons_of_one_node_without_an_uncordon_between_are_a_duplicate(
    ledger: Ledger, db_engine: Engine
) -> None:
    first = ledger.run_once(spec("run-1/cordon", "cordon-node", "node/gpu-3"), done, done)
    second = ledger.run_once(spec("run-2/cordon", "cordon-node", "node/gpu-3"), done, done)

    report = reconcile(db_engine, incident_id=INCIDENT, grace=0)

    assert [(f.op_id, f.related_op_id) for f in report.duplicates] == [(second.op_id, first.op_id)]


def test_a_cordon_undone_before_the_next_cordon_is_not_a_duplicate(
    ledger: Ledger, db_engine: Engine
) -> None:
    cordon = ledger.run_once(spec("cordon/1", "cordon-node", "node/gpu-3"), done, done)
    ledger.run_once(
        spec("uncordon/1", "uncordon-node", "node/gpu-3", compensates=cordon.op_id), done, done
    )
    ledger.run_once(spec("cordon/2", "cordon-node", "node/gpu-3"), done, done)
    ledger.run_once(spec("cordon/gpu-4", "cordon-node", "node/gpu-4"), done, done)

    report = reconcile(db_engine, incident_id=INCIDENT, grace=0)

    assert report.duplicates == []


def test_undoing_two_different_measures_to_one_level_is_not_a_duplicate_but_undoing_one_twice_is(
    ledger: Ledger, db_engine: Engine
) -> None:
    target = "serving/service/llm"
    tier = ledger.run_once(
        spec("protect/tier", "shed-tier", target, intent={"tier": 1}), done, done
    )
    d3 = ledger.run_once(spec("protect/D3", "shed-tier", target, intent={"tier": 3}), done, done)
    restore = {"tier": 0}
    for measure in (tier, d3):
        ledger.run_once(
            spec(
                f"{measure.op_id}/undo",
                "restore-shed-tier",
                target,
                intent=restore,
                compensates=measure.op_id,
            ),
            done,
            done,
        )
    assert reconcile(db_engine, incident_id=INCIDENT, grace=0).duplicates == []

    again = ledger.run_once(
        spec("d3-undo-again", "restore-shed-tier", target, intent=restore, compensates=d3.op_id),
        done,
        done,
    )
    report = reconcile(db_engine, incident_id=INCIDENT, grace=0)
    assert [f.op_id for f in report.duplicates] == [again.op_id]


def test_changing_one_target_step_by_step_is_not_a_duplicate_but_repeating_a_step_is(
    ledger: Ledger, db_engine: Engine
) -> None:
    target = "serving/pod/llm-warm-0"
    for step, weight in (("10", 10), ("40", 40), ("100", 100)):
        ledger.run_once(
            spec(f"ramp/{step}", "router-weights", target, intent={"weight": weight}), done, done
        )
    assert reconcile(db_engine, incident_id=INCIDENT, grace=0).duplicates == []

    again = ledger.run_once(
        spec("ramp/100-again", "router-weights", target, intent={"weight": 100}), done, done
    )
    report = reconcile(db_engine, incident_id=INCIDENT, grace=0)
    assert [(f.op_id, f.related_op_id) for f in report.duplicates] == [
        (again.op_id, f"{INCIDENT}/ramp/100")
    ]


def test_proposed_or_applied_operations_never_confirmed_after_the_grace_are_orphans(
    ledger: Ledger, db_engine: Engine
) -> None:
    never_applied = ledger.propose(spec("label/llm-0", "label-pod", "serving/pod/llm-0"))
    never_seen = ledger.run_once(spec("label/llm-1", "label-pod", "serving/pod/llm-1"), done)
    ledger.run_once(spec("label/llm-2", "label-pod", "serving/pod/llm-2"), done, done)
    ledger.propose(spec("label/llm-3", "label-pod", "serving/pod/llm-3"))
    assert ledger.claim(f"{INCIDENT}/label/llm-3") is not None  # being applied right now
    ledger.run_once(spec("label/llm-4", "label-pod", "serving/pod/llm-4", dry_run=True), done)

    within_grace = reconcile(db_engine, incident_id=INCIDENT, grace=3600)
    report = reconcile(db_engine, incident_id=INCIDENT, grace=0)

    assert within_grace.orphans == []
    assert {f.op_id: f.detail["state"] for f in report.orphans} == {
        never_applied.op_id: "proposed",
        never_seen.op_id: "applied",
    }


def test_an_emergency_measure_without_a_confirmed_rollback_is_drift_once_the_incident_closed(
    ledger: Ledger, db_engine: Engine
) -> None:
    def shed(tier: str) -> dict[str, Any]:
        return spec(f"protect/{tier}", "shed-tier", f"serving/service/gw-{tier}", emergency=True)

    kept = ledger.run_once(shed("batch"), done, done)
    half_undone = ledger.run_once(shed("free"), done, done)
    undone = ledger.run_once(shed("trial"), done, done)
    ledger.run_once(
        spec(
            "rollback/free", "unshed-tier", "serving/service/gw-free", compensates=half_undone.op_id
        ),
        done,
    )
    ledger.run_once(
        spec("rollback/trial", "unshed-tier", "serving/service/gw-trial", compensates=undone.op_id),
        done,
        done,
    )

    while_open = reconcile(db_engine, incident_id=INCIDENT, grace=3600)
    ledger.close_incident(INCIDENT)
    after_close = reconcile(db_engine, incident_id=INCIDENT, grace=3600)

    assert while_open.drift == []
    assert {(f.op_id, f.related_op_id, f.detail["rollback_state"]) for f in after_close.drift} == {
        (kept.op_id, None, None),
        (half_undone.op_id, f"{INCIDENT}/rollback/free", "applied"),
    }


def test_a_second_pass_does_not_report_the_same_rows_again(
    ledger: Ledger, db_engine: Engine
) -> None:
    ledger.propose(spec("label/llm-0", "label-pod", "serving/pod/llm-0"))
    ledger.run_once(spec("a/cordon", "cordon-node", "node/gpu-3"), done, done)
    ledger.run_once(spec("b/cordon", "cordon-node", "node/gpu-3"), done, done)

    first = reconcile(db_engine, grace=0)
    second = reconcile(db_engine, grace=0)

    assert (len(first.orphans), len(first.duplicates)) == (1, 1)
    assert second.findings == ()
    assert len(findings(db_engine, incident_id=INCIDENT)) == 2
    with db_engine.connect() as conn:
        counts = conn.execute(
            text("SELECT duplicates, orphans, drift FROM reconciliation_runs ORDER BY run_id")
        ).all()
    assert [tuple(row) for row in counts] == [(1, 1, 0), (0, 0, 0)]


def test_a_reconciler_skips_rows_another_reconciler_has_locked_instead_of_waiting(
    ledger: Ledger, db_engine: Engine, database_url: str
) -> None:
    for n in range(4):
        ledger.propose(spec(f"label/llm-{n}", "label-pod", f"serving/pod/llm-{n}"))
    run_a = start_run(db_engine, reconciler="a", grace=0)
    # B gives up on any row lock after 2 s: waiting instead of skipping would fail the test.
    impatient = create_engine(database_url, connect_args={"options": "-c lock_timeout=2000"})

    try:
        with db_engine.connect() as conn_a:
            found_by_a = find_orphans(conn_a, run_a, grace=0)  # locks held until commit
            during = reconcile(impatient, grace=0, reconciler="b")
            conn_a.commit()
        after = reconcile(impatient, grace=0, reconciler="c")
    finally:
        impatient.dispose()

    assert len(found_by_a) == 4
    assert during.orphans == []
    assert after.orphans == []
    assert len(findings(db_engine)) == 4


def test_two_reconcilers_running_together_split_the_rows_and_report_each_once(
    db_engine: Engine,
) -> None:
    with db_engine.begin() as conn:
        conn.execute(text("INSERT INTO incidents (incident_id) VALUES (:i)"), {"i": INCIDENT})
        conn.execute(
            text(
                "INSERT INTO operations (op_id, incident_id, kind, target, proposed_at) "
                "SELECT :i || '/label/llm-' || n, :i, 'label-pod', 'serving/pod/llm-' || n, "
                "now() - interval '1 hour' FROM generate_series(1, 2000) AS n"
            ),
            {"i": INCIDENT},
        )
    reports = []
    barrier = threading.Barrier(2)

    def run(name: str) -> None:
        barrier.wait()
        reports.append(reconcile(db_engine, grace=60, reconciler=name))

    threads = [threading.Thread(target=run, args=(name,)) for name in ("r1", "r2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    reported = [f.op_id for report in reports for f in report.orphans]
    assert len(reported) == 2000
    assert len(set(reported)) == 2000
