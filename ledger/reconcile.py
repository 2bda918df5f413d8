"""Reconciliation queries: duplicates, orphans and drift, each reported once.

Called from the ReconcileWorkflow's activity and `fleetmend reconcile` after an incident;
`ledger.report` renders the findings. Each finder is one statement: pick the candidate
operation rows ``FOR UPDATE OF o SKIP LOCKED``, insert a finding per row
``ON CONFLICT (kind, op_id) DO NOTHING``, return what was inserted. Two reconcilers running
at once therefore split the rows between them instead of both reporting them (a row
locked by one is skipped by the other), and a later run does not report a row again (the
finding exists: the ``NOT EXISTS`` filter skips it, the unique key backs that up when two
runs' snapshots overlap).

- duplicate: two applied operations with the same incident, kind, target and intent,
  consecutive in applied order, with no compensation of the first applied between them;
  two compensations of different measures (undoing an escalation and the tier beneath it)
  are two effects even when both restore the same level.
  The same intent is what makes the second a duplicate: a ramp that sets a pod's weight
  to 10, then 40, then 100 changes one target three times on purpose, while labelling
  the same pod the same way under two operation ids is one effect applied twice.
- orphan: proposed or applied, never confirmed, untouched for longer than the grace
  period (a live claim means someone is applying it now: not an orphan).
- drift: an emergency measure that was applied and whose rollback (an operation that
  compensates it) is not confirmed, once its incident is closed or the grace has passed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

from ledger.store import default_owner

_SCOPE = "(CAST(:incident_id AS text) IS NULL OR {alias}.incident_id = CAST(:incident_id AS text))"
_NOT_REPORTED = (
    "NOT EXISTS (SELECT 1 FROM reconciliation_findings f "
    "WHERE f.kind = '{kind}' AND f.op_id = {alias}.op_id)"
)
_REPORT = """
, found AS (
    INSERT INTO reconciliation_findings (run_id, kind, op_id, related_op_id, incident_id, detail)
    SELECT :run_id, '{kind}', op_id, related_op_id, incident_id, detail FROM candidates
    ON CONFLICT (kind, op_id) DO NOTHING
    RETURNING op_id, related_op_id, incident_id, detail
)
SELECT op_id, related_op_id, incident_id, detail FROM found
"""

ORPHANS_SQL = f"""
WITH candidates AS (
    SELECT o.op_id, NULL::text AS related_op_id, o.incident_id,
           jsonb_build_object(
               'state', o.state, 'kind', o.kind, 'target', o.target,
               'attempts', o.attempts, 'error', o.error,
               'proposed_at', o.proposed_at, 'applied_at', o.applied_at
           ) AS detail
    FROM operations o
    WHERE o.state IN ('proposed', 'applied')
      AND NOT o.dry_run
      AND o.proposed_at < now() - make_interval(secs => :grace)
      AND COALESCE(o.applied_at, o.proposed_at) < now() - make_interval(secs => :grace)
      AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= now())
      AND {_SCOPE.format(alias="o")}
      AND {_NOT_REPORTED.format(kind="orphan", alias="o")}
    FOR UPDATE OF o SKIP LOCKED
)""" + _REPORT.format(kind="orphan")

DRIFT_SQL = f"""
WITH candidates AS (
    SELECT o.op_id,
           (SELECT c.op_id FROM operations c WHERE c.compensates = o.op_id
            ORDER BY c.proposed_at DESC, c.op_id DESC LIMIT 1) AS related_op_id,
           o.incident_id,
           jsonb_build_object(
               'state', o.state, 'kind', o.kind, 'target', o.target,
               'applied_at', o.applied_at, 'incident_closed_at', i.closed_at,
               'rollback_state',
               (SELECT c.state FROM operations c WHERE c.compensates = o.op_id
                ORDER BY c.proposed_at DESC, c.op_id DESC LIMIT 1)
           ) AS detail
    FROM operations o
    LEFT JOIN incidents i ON i.incident_id = o.incident_id
    WHERE o.emergency
      AND NOT o.dry_run
      AND o.applied_at IS NOT NULL
      AND (i.closed_at IS NOT NULL OR o.applied_at < now() - make_interval(secs => :grace))
      AND NOT EXISTS (
          SELECT 1 FROM operations c WHERE c.compensates = o.op_id AND c.state = 'confirmed'
      )
      AND {_SCOPE.format(alias="o")}
      AND {_NOT_REPORTED.format(kind="drift", alias="o")}
    FOR UPDATE OF o SKIP LOCKED
)""" + _REPORT.format(kind="drift")

# Groups first: an index-only scan of ix_operations_group in key order, aggregated as it
# streams (no hash table over a million one-row groups); then the window only over the few
# groups holding more than one applied operation, each read through the same index. `applied_at IS NOT NULL` already excludes
# dry runs, which are never applied; operations without an incident are not compared.
DUPLICATES_SQL = f"""
WITH groups AS (
    SELECT g.incident_id, g.kind, g.target
    FROM operations g
    WHERE g.applied_at IS NOT NULL AND g.incident_id IS NOT NULL AND {_SCOPE.format(alias="g")}
    GROUP BY g.incident_id, g.kind, g.target
    HAVING count(*) > 1
), ordered AS (
    -- LATERAL: one index scan per repeated group, whatever the planner guesses their number.
    SELECT d.* FROM groups
    CROSS JOIN LATERAL (
        SELECT d.op_id, d.incident_id, d.kind, d.target, d.applied_at, d.compensates,
               d.intent = lag(d.intent) OVER w AS same_intent,
               lag(d.op_id) OVER w AS prev_op_id,
               lag(d.compensates) OVER w AS prev_compensates,
               lag(d.applied_at) OVER w AS prev_applied_at
        FROM operations d
        WHERE d.incident_id = groups.incident_id AND d.kind = groups.kind
          AND d.target = groups.target AND d.applied_at IS NOT NULL AND NOT d.dry_run
        WINDOW w AS (ORDER BY d.applied_at, d.op_id)
    ) d
), pairs AS (
    SELECT p.* FROM ordered p
    WHERE p.prev_op_id IS NOT NULL
      AND p.same_intent
      AND p.compensates IS DISTINCT FROM p.prev_op_id
      -- Undoing two different measures is two effects, even when both land on one level.
      AND NOT (p.compensates IS NOT NULL AND p.prev_compensates IS NOT NULL
               AND p.compensates <> p.prev_compensates)
      AND NOT EXISTS (
          SELECT 1 FROM operations c
          WHERE c.compensates = p.prev_op_id
            AND c.applied_at IS NOT NULL AND c.applied_at <= p.applied_at
      )
), candidates AS (
    SELECT o.op_id, pairs.prev_op_id AS related_op_id, o.incident_id,
           jsonb_build_object(
               'kind', o.kind, 'target', o.target,
               'applied_at', o.applied_at, 'previous_applied_at', pairs.prev_applied_at
           ) AS detail
    FROM operations o
    JOIN pairs ON pairs.op_id = o.op_id
    WHERE {_NOT_REPORTED.format(kind="duplicate", alias="o")}
    FOR UPDATE OF o SKIP LOCKED
)""" + _REPORT.format(kind="duplicate")


@dataclass(frozen=True)
class Finding:
    kind: str  # duplicate | orphan | drift
    op_id: str
    related_op_id: str | None  # duplicate: the earlier operation; drift: its rollback
    incident_id: str | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReconciliationReport:
    run_id: int
    reconciler: str
    incident_id: str | None
    findings: tuple[Finding, ...]
    seconds: float
    seconds_by_kind: dict[str, float] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def duplicates(self) -> list[Finding]:
        return self.of_kind("duplicate")

    @property
    def orphans(self) -> list[Finding]:
        return self.of_kind("orphan")

    @property
    def drift(self) -> list[Finding]:
        return self.of_kind("drift")


def _seconds(grace: timedelta | float) -> float:
    return grace.total_seconds() if isinstance(grace, timedelta) else float(grace)


def _report(conn: Connection, sql: str, kind: str, params: dict[str, Any]) -> list[Finding]:
    rows = conn.execute(text(sql), params).all()
    return [
        Finding(kind, row.op_id, row.related_op_id, row.incident_id, dict(row.detail))
        for row in rows
    ]


def find_duplicates(
    conn: Connection, run_id: int, *, incident_id: str | None = None
) -> list[Finding]:
    """Report new duplicates in the caller's transaction (rows stay locked until it ends)."""
    return _report(
        conn, DUPLICATES_SQL, "duplicate", {"run_id": run_id, "incident_id": incident_id}
    )


def find_orphans(
    conn: Connection,
    run_id: int,
    *,
    grace: timedelta | float,
    incident_id: str | None = None,
) -> list[Finding]:
    params = {"run_id": run_id, "incident_id": incident_id, "grace": _seconds(grace)}
    return _report(conn, ORPHANS_SQL, "orphan", params)


def find_drift(
    conn: Connection,
    run_id: int,
    *,
    grace: timedelta | float,
    incident_id: str | None = None,
) -> list[Finding]:
    params = {"run_id": run_id, "incident_id": incident_id, "grace": _seconds(grace)}
    return _report(conn, DRIFT_SQL, "drift", params)


def start_run(
    engine: Engine,
    *,
    reconciler: str | None = None,
    incident_id: str | None = None,
    grace: timedelta | float = timedelta(minutes=15),
) -> int:
    """Record a reconciliation run (committed, so findings can refer to it)."""
    with engine.begin() as conn:
        run_id = conn.execute(
            text(
                "INSERT INTO reconciliation_runs (reconciler, incident_id, grace_seconds) "
                "VALUES (:reconciler, :incident_id, :grace) RETURNING run_id"
            ),
            {
                "reconciler": reconciler or default_owner(),
                "incident_id": incident_id,
                "grace": _seconds(grace),
            },
        ).scalar_one()
    return int(run_id)


def finish_run(engine: Engine, run_id: int, findings: list[Finding]) -> None:
    counts = {k: sum(1 for f in findings if f.kind == k) for k in ("duplicate", "orphan", "drift")}
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE reconciliation_runs SET finished_at = now(), duplicates = :duplicate, "
                "orphans = :orphan, drift = :drift WHERE run_id = :run_id"
            ),
            {"run_id": run_id, **counts},
        )


def reconcile(
    engine: Engine,
    *,
    incident_id: str | None = None,
    grace: timedelta | float = timedelta(minutes=15),
    reconciler: str | None = None,
) -> ReconciliationReport:
    """One reconciliation pass: a run row, then each kind of finding in its own transaction."""
    started = time.perf_counter()
    name = reconciler or default_owner()
    run_id = start_run(engine, reconciler=name, incident_id=incident_id, grace=grace)
    findings: list[Finding] = []
    timings: dict[str, float] = {}
    for kind in ("duplicate", "orphan", "drift"):
        began = time.perf_counter()
        with engine.begin() as conn:  # one transaction per kind: its row locks end with it
            if kind == "duplicate":
                findings += find_duplicates(conn, run_id, incident_id=incident_id)
            elif kind == "orphan":
                findings += find_orphans(conn, run_id, grace=grace, incident_id=incident_id)
            else:
                findings += find_drift(conn, run_id, grace=grace, incident_id=incident_id)
        timings[kind] = round(time.perf_counter() - began, 3)
    finish_run(engine, run_id, findings)
    return ReconciliationReport(
        run_id=run_id,
        reconciler=name,
        incident_id=incident_id,
        findings=tuple(findings),
        seconds=time.perf_counter() - started,
        seconds_by_kind=timings,
    )


def findings(
    engine: Engine, *, incident_id: str | None = None, run_id: int | None = None
) -> list[Finding]:
    """Stored findings (for reports), oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT kind, op_id, related_op_id, incident_id, detail "
                "FROM reconciliation_findings "
                f"WHERE {_SCOPE.format(alias='reconciliation_findings')} "
                "AND (CAST(:run_id AS bigint) IS NULL OR run_id = CAST(:run_id AS bigint)) "
                "ORDER BY finding_id"
            ),
            {"incident_id": incident_id, "run_id": run_id},
        ).all()
    return [Finding(r.kind, r.op_id, r.related_op_id, r.incident_id, dict(r.detail)) for r in rows]


def store_findings(
    engine: Engine,
    *,
    incident_id: str | None,
    findings: list[tuple[str, str, dict[str, Any]]],
    reconciler: str,
) -> tuple[int, int]:
    """Record findings concluded elsewhere (ReconcileWorkflow's comparison with the cluster).

    One run row, then each (kind, op_id) at most once across all runs, like the SQL finders.
    Returns the run id and how many findings were new.
    """
    run_id = start_run(engine, reconciler=reconciler, incident_id=incident_id, grace=0)
    stored: list[Finding] = []
    with engine.begin() as conn:
        for kind, op_id, detail in findings:
            row = conn.execute(
                text(
                    "INSERT INTO reconciliation_findings "
                    "(run_id, kind, op_id, related_op_id, incident_id, detail) "
                    "VALUES (:run_id, :kind, :op_id, NULL, :incident_id, CAST(:detail AS jsonb)) "
                    "ON CONFLICT (kind, op_id) DO NOTHING RETURNING op_id"
                ),
                {
                    "run_id": run_id,
                    "kind": kind,
                    "op_id": op_id,
                    "incident_id": incident_id,
                    "detail": json.dumps(detail, default=str),
                },
            ).first()
            if row is not None:
                stored.append(Finding(kind, op_id, None, incident_id, detail))
    finish_run(engine, run_id, stored)
    return run_id, len(stored)
