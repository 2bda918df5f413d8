"""What the on-call operator does from a terminal: read an incident, decide a gate.

Called from `worker/cli.py` (`fleetmend status`, `fleetmend approve`). Talks to Temporal
only: the `status` query of ReplicaLossWorkflow and its `approve` update (whose validator
refuses an unknown or already decided gate before anything is recorded). Every failure
becomes an OperatorError with one line for the terminal.

The status (workflows.types.IncidentStatus) is rendered from its JSON form, so a field
the workflow adds later is shown as a plain row instead of breaking the command.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from worker.settings import Settings
from workflows.types import QUERY_STATUS, UPDATE_APPROVE, WORKFLOW_NAME, ApprovalInput

CONNECT_TIMEOUT_S = 5.0


class OperatorError(Exception):
    """One line for the operator; the CLI prints it and exits non-zero."""


def incident_id(value: str) -> str:
    """Accept the workflow id, or the short `namespace/pool` form the status table shows."""
    value = value.strip()
    if value.startswith("replica-loss/"):
        return value
    if value.count("/") == 1 and all(value.split("/")):
        return f"replica-loss/{value}"
    return value


async def connect(settings: Settings) -> Client:
    try:
        return await asyncio.wait_for(
            Client.connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                data_converter=pydantic_data_converter,
            ),
            timeout=CONNECT_TIMEOUT_S,
        )
    except (TimeoutError, RuntimeError, RPCError, OSError) as exc:
        raise OperatorError(
            f"cannot reach Temporal at {settings.temporal_address} "
            f"(namespace {settings.temporal_namespace}): {type(exc).__name__}"
        ) from exc


def _rpc_problem(exc: RPCError, workflow_id: str) -> OperatorError:
    if exc.status == RPCStatusCode.NOT_FOUND:
        return OperatorError(f"no incident {workflow_id!r} (see `fleetmend status`)")
    if exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
        # Queries and updates are answered by a worker, not by the server.
        return OperatorError(
            f"no worker answered for {workflow_id!r} in time: is `fleetmend worker` running "
            "on the incident's task queue?"
        )
    return OperatorError(f"Temporal refused: {exc.status.name}: {exc.message}")


async def open_incidents(client: Client) -> list[dict[str, Any]]:
    rows = []
    query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running'"
    async for wf in client.list_workflows(query):
        rows.append({"id": wf.id, "started": wf.start_time, "status": wf.status})
    return rows


async def incident_status(client: Client, workflow_id: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(workflow_id)
    try:
        result = await handle.query(QUERY_STATUS, rpc_timeout=timedelta(seconds=10))
    except RPCError as exc:
        raise _rpc_problem(exc, workflow_id) from exc
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
        raise OperatorError(f"the incident did not answer its status query: {exc}") from exc
    if hasattr(result, "model_dump"):
        result = result.model_dump(mode="json")
    if not isinstance(result, dict):
        raise OperatorError(f"unexpected status shape: {type(result).__name__}")
    return result


async def decide_gate(
    client: Client, workflow_id: str, gate: str, *, by: str, approve: bool, reason: str
) -> Any:
    handle = client.get_workflow_handle(workflow_id)
    decision = ApprovalInput(gate=gate, approver=by, approve=approve, reason=reason)
    try:
        return await handle.execute_update(
            UPDATE_APPROVE, decision, rpc_timeout=timedelta(seconds=30)
        )
    except WorkflowUpdateFailedError as exc:
        cause = str(exc.cause) if exc.cause is not None else str(exc)
        raise OperatorError(f"gate {gate!r} not decided: {cause}") from exc
    except RPCError as exc:
        raise _rpc_problem(exc, workflow_id) from exc


# ---------------------------------------------------------------- rendering


def _when(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%H:%M:%S")
    text = str(value)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).strftime("%H:%M:%S")
    except ValueError:
        return text


def _short(value: Any, limit: int = 80) -> str:
    if isinstance(value, dict):
        text = ", ".join(f"{k}={v}" for k, v in value.items())
    elif isinstance(value, list):
        text = ", ".join(map(str, value))
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_KNOWN = {
    "incident_id",
    "step",
    "outcome",
    "dry_run",
    "severity",
    "losses",
    "pending_gates",
    "timeline",
    "effects",
    "compensations",
    "runs",
}


def _duration(entry: dict[str, Any]) -> str:
    try:
        start = datetime.fromisoformat(str(entry["started_at"]).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(entry["ended_at"]).replace("Z", "+00:00"))
    except (KeyError, ValueError, TypeError):
        return ""
    return f"{(end - start).total_seconds():.1f}s"


def render_status(workflow_id: str, status: dict[str, Any]) -> RenderableType:
    """IncidentStatus (workflows/types.py) as a headline, pending gates, timeline, effects."""
    parts: list[RenderableType] = []
    title = Text.assemble(("incident ", "bold"), (workflow_id, "bold cyan"))
    title.append(f"  step: {status.get('step', '?')}", style="bold yellow")
    if status.get("outcome"):
        title.append(f"  outcome: {status['outcome']}")
    if status.get("severity"):
        title.append(f"  severity: {status['severity']}")
    if status.get("dry_run"):
        title.append("  (dry run)", style="magenta")
    parts.append(title)
    if status.get("incident_id") and status["incident_id"] != workflow_id:
        parts.append(Text(f"incident id: {status['incident_id']}", style="dim"))
    if status.get("losses"):
        parts.append(Text(f"lost: {', '.join(map(str, status['losses']))}"))

    pending = [g for g in status.get("pending_gates") or [] if isinstance(g, dict)]
    if pending:
        table = Table(title="pending gates", title_justify="left", show_edge=False)
        for column in ("gate", "kind", "approving would", "on timeout", "deadline"):
            table.add_column(column)
        for g in pending:
            table.add_row(
                str(g.get("gate", "?")),
                str(g.get("kind", "")),
                _short(g.get("would_do", "")),
                _short(g.get("on_timeout", "")),
                _when(g.get("deadline")),
            )
        parts.append(table)
        parts.append(Text("decide with: fleetmend approve INCIDENT GATE --by NAME [--deny]"))
    else:
        parts.append(Text("no pending gates", style="green"))

    timeline = status.get("timeline") or []
    if timeline:
        table = Table(title="timeline", title_justify="left", show_edge=False)
        for column in ("at", "step", "outcome", "took", "evidence"):
            table.add_column(column)
        for entry in timeline:
            if not isinstance(entry, dict):
                continue
            step = str(entry.get("step", ""))
            if entry.get("dry_run"):
                step += " (dry run)"
            table.add_row(
                _when(entry.get("started_at")),
                step,
                _short(entry.get("outcome", "")),
                _duration(entry),
                _short(entry.get("evidence") or ""),
            )
        parts.append(table)

    effects = status.get("effects") or []
    if effects:
        table = Table(title="effects", title_justify="left", show_edge=False)
        for column in ("at", "step", "activity", "target", "op id"):
            table.add_column(column)
        for effect in effects:
            if isinstance(effect, dict):
                table.add_row(
                    _when(effect.get("at")),
                    str(effect.get("step", "")),
                    str(effect.get("activity", "")),
                    str(effect.get("target", "")),
                    str(effect.get("op_id", "")),
                )
        parts.append(table)
    compensations = status.get("compensations") or []
    if compensations:
        done = sum(1 for c in compensations if isinstance(c, dict) and c.get("done"))
        parts.append(Text(f"compensations: {done} of {len(compensations)} done"))

    other = {k: v for k, v in status.items() if k not in _KNOWN and v not in (None, [], {})}
    if other:
        table = Table(show_header=False, show_edge=False, box=None)
        table.add_column(style="dim")
        table.add_column()
        for key, value in other.items():
            table.add_row(key, _short(value, 100))
        parts.append(table)
    return Group(*parts)


def render_open_incidents(rows: list[dict[str, Any]]) -> RenderableType:
    if not rows:
        return Text("no open incidents", style="green")
    table = Table(title="open incidents", title_justify="left", show_edge=False)
    table.add_column("incident")
    table.add_column("started")
    for row in rows:
        started = row["started"]
        table.add_row(row["id"], started.isoformat(timespec="seconds") if started else "")
    return table


def print_renderable(renderable: RenderableType, *, console: Console | None = None) -> None:
    (console or Console()).print(renderable)


# ---------------------------------------------------------------- after the incident


async def resolve_incident(client: Client | None, value: str) -> tuple[str, str | None]:
    """(workflow id, ledger incident id) for what the operator typed.

    An incident id is `{workflow_id}@{stamp}` (workflows/opids.py): it names one run. A
    workflow id or `namespace/pool` names the pool's latest run; its incident id is read
    from the `status` query, so it needs Temporal (`client`).
    """
    if "@" in value:
        return incident_id(value.split("@", 1)[0]), value
    workflow_id = incident_id(value)
    if client is None:
        return workflow_id, None
    status = await incident_status(client, workflow_id)
    return workflow_id, status.get("incident_id") or None


def reconcile_ledger(database_url: str, ledger_incident: str | None) -> list[dict[str, Any]]:
    """One reconciliation pass over the ledger (ledger/reconcile.py); the new findings."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError

    from ledger.reconcile import reconcile

    engine = create_engine(database_url, pool_pre_ping=True)
    try:
        report = reconcile(engine, incident_id=ledger_incident)
    except SQLAlchemyError as exc:
        raise OperatorError(f"ledger unreachable: {type(exc).__name__}") from exc
    finally:
        engine.dispose()
    return [
        {"kind": f.kind, "op_id": f.op_id, "related": f.related_op_id or "", "detail": f.detail}
        for f in report.findings
    ]


def render_findings(scope: str, findings: list[dict[str, Any]]) -> RenderableType:
    if not findings:
        return Text(f"{scope}: no duplicates, orphans or drift", style="green")
    table = Table(title=f"{scope}: {len(findings)} finding(s)", title_justify="left")
    for column in ("kind", "operation", "related", "detail"):
        table.add_column(column)
    for f in findings:
        table.add_row(f["kind"], f["op_id"], f["related"], _short(f["detail"]))
    return table


async def build_report(
    client: Client, workflow_id: str, ledger_incident: str | None, database_url: str | None
) -> Any:
    """An IncidentReport (ledger/report.py) from the workflow's status and the ledger."""
    from ledger.report import EffectRow, FindingRow, IncidentReport, Summary, TimelineRow

    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as exc:
        raise _rpc_problem(exc, workflow_id) from exc
    status = await incident_status(client, workflow_id)
    ledger_incident = ledger_incident or status.get("incident_id") or workflow_id
    namespace, _, pool = workflow_id.removeprefix("replica-loss/").partition("/")

    effects: list[EffectRow] = []
    found: list[FindingRow] = []
    notes: list[str] = []
    if database_url is not None:
        effects, found = _ledger_rows(database_url, ledger_incident)
    else:
        notes.append("FLEETMEND_DATABASE_URL unset: effects from the workflow, no findings")
        effects = [
            EffectRow(
                op_id=e.get("op_id", ""),
                kind=e.get("activity", ""),
                target=e.get("target", ""),
                state="dry-run" if e.get("dry_run") else "applied",
            )
            for e in status.get("effects") or []
        ]
    losses = status.get("losses") or []
    return IncidentReport(
        incident_id=ledger_incident,
        namespace=namespace,
        pool=pool,
        opened_at=description.start_time,
        closed_at=description.close_time,
        summary=Summary(
            severity=str(status.get("severity") or "unknown"),
            status=str(
                status.get("outcome")
                or (description.status.name.lower() if description.status else "unknown")
            ),
            capacity_lost=f"{len(losses)} replica(s): {', '.join(map(str, losses))}"
            if losses
            else "",
            notes=notes,
        ),
        timeline=[
            TimelineRow(
                step=str(t.get("step", "")),
                started_at=t.get("started_at"),
                ended_at=t.get("ended_at"),
                outcome=str(t.get("outcome", "")),
                evidence=t.get("evidence") or {},
            )
            for t in status.get("timeline") or []
            if isinstance(t, dict)
        ],
        effects=effects,
        findings=found,
    )


def _ledger_rows(database_url: str, ledger_incident: str) -> tuple[list[Any], list[Any]]:
    from sqlalchemy.exc import SQLAlchemyError

    from ledger.reconcile import findings
    from ledger.report import EffectRow, FindingRow
    from ledger.store import Ledger

    ledger = Ledger.connect(database_url, pool_size=1)
    try:
        operations = ledger.operations(ledger_incident)
        stored = findings(ledger.engine, incident_id=ledger_incident)
    except SQLAlchemyError as exc:
        raise OperatorError(f"ledger unreachable: {type(exc).__name__}") from exc
    finally:
        ledger.close()
    effects = [
        EffectRow(
            op_id=op.op_id,
            kind=op.kind,
            target=op.target,
            state=op.state,
            attempts=op.attempts,
            compensates=op.compensates,
        )
        for op in operations
    ]
    found = [
        FindingRow(kind=f.kind, op_id=f.op_id, detail=_short(f.detail, 200))  # type: ignore[arg-type]
        for f in stored
    ]
    return effects, found
