"""The end of a drill: final incident status, reconciliation, reports, the `--json` object.

Called from `worker/drill.py` once every incident closed. Numbers come from three places
and are never mixed up: the workflow's own status (steps, severity, gates), the ledger
(effects and reconciliation findings) and the simulated fleet (requests, routing, the
warm floor), so a reviewer can hold each against the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ledger.reconcile import findings as stored_findings, reconcile
from ledger.report import (
    EffectRow,
    FindingRow,
    IncidentReport,
    Summary,
    TimelineRow,
    write_report,
)
from ledger.store import Ledger
from workflows.types import QUERY_STATUS

if TYPE_CHECKING:
    from worker.drill import Drill, DrillResult

APPLIED = ("applied", "confirmed", "compensated")


def _duration(entry: dict[str, Any]) -> float | None:
    from datetime import datetime

    start, end = entry.get("started_at"), entry.get("ended_at")
    if not start or not end:
        return None
    return round(
        (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds(), 3
    )


def assessment(status: dict[str, Any]) -> dict[str, Any]:
    """What the incident's assessment found (lost replicas, pool size, common causes):
    the evidence of its last `assess` entry, since the `status` query carries no facts."""
    entries = [e for e in status.get("timeline") or [] if e.get("step") == "assess"]
    return dict(entries[-1].get("evidence") or {}) if entries else {}


async def _final_status(drill: Drill, workflow_id: str) -> dict[str, Any] | None:
    assert drill.client is not None
    handle = drill.client.get_workflow_handle(workflow_id)
    with contextlib.suppress(Exception):
        status = await handle.query(QUERY_STATUS)
        return status.model_dump(mode="json") if hasattr(status, "model_dump") else status
    return drill.incidents[workflow_id].get("status")


async def _wait_for_reconcile(drill: Drill, incident_id: str, timeout_s: float = 60.0) -> None:
    """The incident starts its ReconcileWorkflow on close; let it store its findings."""
    from workflows.reconcile import reconcile_workflow_id

    assert drill.client is not None
    handle = drill.client.get_workflow_handle(reconcile_workflow_id(incident_id))
    with contextlib.suppress(Exception):
        await asyncio.wait_for(handle.result(), timeout=timeout_s)


async def collect_results(drill: Drill) -> DrillResult:
    from worker.drill import DrillResult, EffectsSummary, IncidentOutcome, StepOutcome

    assert drill.stack is not None
    ledger = Ledger.connect(drill.stack.database_url, pool_size=2)
    incidents: list[IncidentOutcome] = []
    effects = EffectsSummary()
    reports: list[str] = []
    try:
        for workflow_id in sorted(drill.incidents):
            status = await _final_status(drill, workflow_id) or {}
            incident_id = str(status.get("incident_id") or "")
            if incident_id:
                await _wait_for_reconcile(drill, incident_id)
            timeline = status.get("timeline") or []
            facts = assessment(status)
            outcome = IncidentOutcome(
                workflow_id=workflow_id,
                incident_id=incident_id,
                severity=str(status.get("severity") or facts.get("severity") or "unknown"),
                status=str(drill.incidents[workflow_id].get("execution", "RUNNING")),
                outcome=str(status.get("outcome", "")),
                common_causes=[
                    str(c.get("cause") if isinstance(c, dict) else c)
                    for c in facts.get("common_causes") or []
                ],
                steps=[
                    StepOutcome(
                        step=str(e.get("step")),
                        outcome=str(e.get("outcome")),
                        duration_s=_duration(e),
                    )
                    for e in timeline
                ],
                notes=[str(n) for n in status.get("notes") or []],
            )
            incidents.append(outcome)
            ops = await asyncio.to_thread(ledger.operations, incident_id) if incident_id else []
            all_found: list[Any] = []
            if incident_id:
                # Grace 0: the incident is closed, so anything not confirmed now never will be.
                await asyncio.to_thread(
                    reconcile, ledger.engine, incident_id=incident_id, grace=timedelta(0)
                )
                # This pass's findings and those the incident's ReconcileWorkflow stored.
                all_found = await asyncio.to_thread(
                    stored_findings, ledger.engine, incident_id=incident_id
                )
            effects.applied += sum(1 for op in ops if op.state in APPLIED and not op.dry_run)
            effects.duplicates += sum(1 for f in all_found if f.kind == "duplicate")
            effects.orphans += sum(1 for f in all_found if f.kind == "orphan")
            effects.drift += sum(1 for f in all_found if f.kind == "drift")
            report = _incident_report(drill, workflow_id, status, outcome, ops, all_found)
            out_dir = drill.run_dir / "reports"
            for fmt in ("md", "html", "json"):
                path = await asyncio.to_thread(write_report, report, out_dir, fmt)  # type: ignore[arg-type]
                if fmt == "html":
                    reports.append(str(path))
    finally:
        ledger.close()

    counters = drill.fleet.counters
    observed = drill.observer.summary()
    assert drill.stack is not None
    return DrillResult(
        scenario=drill.scenario.name,
        speed=drill.options.speed,
        wall_s=round(drill.elapsed_wall(), 2),
        incidents=incidents,
        time_to_deroute_s=observed["time_to_deroute_s"],
        routed_after_deroute=observed["routed_after_deroute"],
        time_to_warm_floor_s=observed["time_to_warm_floor_s"],
        requests={
            "offered": counters.offered,
            "served": counters.served,
            "late": counters.late,
            "failed": counters.failed,
            "retried_before_first_byte": counters.retried,
            "terminated_mid_stream": counters.terminated,
            "shed": counters.shed,
            "degraded": counters.degraded,
        },
        duplicate_actions=drill.fleet.actions.duplicates,
        effects=effects,
        approvals=drill.approvals,
        report_paths=reports,
        notifications=list(drill.channel.received),
        temporal_ui=drill.stack.ui_url if drill.options.keep_up else None,
        forbidden=drill.forbidden(),
    )


def _incident_report(
    drill: Drill,
    workflow_id: str,
    status: dict[str, Any],
    outcome: Any,
    ops: list[Any],
    found: list[Any],
) -> IncidentReport:
    namespace, _, pool = workflow_id.removeprefix("replica-loss/").partition("/")
    facts = assessment(status)
    lost = facts.get("lost") or []
    size = facts.get("pool_size") or 0
    observed = drill.observer.summary()
    switch = [
        v
        for k, v in observed["time_to_deroute_s"].items()
        if k.startswith(f"{namespace}/") and v is not None
    ]
    detection = [
        (lost_ep.alert_at - lost_ep.fault_at)
        for lost_ep in drill.observer.lost.values()
        if lost_ep.namespace == namespace and lost_ep.pool == pool and lost_ep.alert_at is not None
    ]
    notes = list(outcome.notes)
    for entry in status.get("timeline") or []:
        evidence = entry.get("evidence") or {}
        if "fragmentation" in str(evidence).lower() or "fragmentation" in str(entry.get("outcome")):
            notes.append(f"{entry.get('step')}: fragmentation: {entry.get('outcome')}")
        if "lead_time_s" in evidence:
            notes.append(f"provisioning lead time announced: {evidence['lead_time_s']} s")
    return IncidentReport(
        incident_id=outcome.incident_id or workflow_id,
        namespace=namespace,
        pool=pool,
        summary=Summary(
            severity=outcome.severity,
            status=f"{outcome.status} ({outcome.outcome})" if outcome.outcome else outcome.status,
            capacity_lost=(
                f"{len(lost)} of {size} replicas ({len(lost) / size:.0%})" if size else ""
            ),
            detection_s=round(max(detection), 3) if detection else None,
            switch_s=max(switch) if switch else None,
            capacity_restored_s=observed["time_to_warm_floor_s"].get(f"{namespace}/{pool}"),
            common_cause=", ".join(outcome.common_causes) or None,
            notes=notes,
        ),
        timeline=[
            TimelineRow(
                step=str(e.get("step")),
                started_at=e.get("started_at"),
                ended_at=e.get("ended_at"),
                outcome=str(e.get("outcome")),
                evidence=e.get("evidence") or {},
            )
            for e in status.get("timeline") or []
        ],
        effects=[
            EffectRow(
                op_id=op.op_id,
                kind=op.kind,
                target=op.target,
                state=op.state + (" (dry run)" if op.dry_run else ""),
                attempts=op.attempts,
                compensates=op.compensates,
            )
            for op in ops
        ],
        findings=[FindingRow(kind=f.kind, op_id=f.op_id, detail=str(f.detail)) for f in found],
        replicas=[s for s in drill.observer.replicas],
        capacity=[s for s in drill.observer.capacity],
    )
