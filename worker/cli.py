"""The `fleetmend` command: the operator's and the platform engineer's entry point.

Every subcommand loads `worker.settings` first, so a bad FLEETMEND_* value stops here with
one line naming the variable. Errors are one clear line and a non-zero exit, never a
traceback. Commands whose feature is not built yet say so and exit 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError

from worker.settings import Settings, SettingsError, describe_settings, load_settings

app = typer.Typer(
    name="fleetmend",
    help="Recover a lost LLM inference replica or GPU node: the runbook as a durable workflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The ledger database.", no_args_is_help=True)
app.add_typer(db_app, name="db")


def fail(message: str, code: int = 1) -> NoReturn:
    # One line whatever the message: scripts and pagers read the first line only.
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    typer.secho(f"fleetmend: {line}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def not_implemented(command: str) -> NoReturn:
    fail(f"`{command}` is not implemented yet", code=2)


def settings_or_exit() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        fail(f"bad setting: {exc}")


def _first_error(exc: ValidationError, prefix: str) -> str:
    err = exc.errors()[0]
    name = prefix + ".".join(str(p) for p in err["loc"]).upper()
    return f"{name}: {err['msg']}"


def _one_line(exc: BaseException) -> str:
    """The first line of the root cause: SQLAlchemy and psycopg messages span several."""
    cause = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return lines[0] if lines else type(cause).__name__


def _configure_logging(s: Settings) -> None:
    from worker.logsafe import configure_logging

    configure_logging(s.log_level)


def _run_operator(coro: Coroutine[Any, Any, None]) -> None:
    import asyncio

    from worker.operator import OperatorError

    code = 0
    try:
        asyncio.run(coro)
    except OperatorError as exc:
        line = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
        typer.secho(f"fleetmend: {line}", err=True, fg=typer.colors.RED)
        code = 1
    # The Temporal SDK's native runtime threads can call back into Python while the
    # interpreter finalises (seen after a refused connect: "Fatal Python error:
    # PyGILState_Release", exit -6). A one-shot command has nothing left to clean up, so
    # it leaves without finalising and its exit code stays the one it chose.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@app.command()
def up() -> None:
    """Start the local stack: PostgreSQL, Temporal dev server + Web UI, worker, intake.

    Uses an embedded PostgreSQL under FLEETMEND_STATE_DIR unless FLEETMEND_DATABASE_URL is
    set. Ctrl-C stops everything it started.
    """
    from worker.stack import run_stack

    sys.exit(run_stack(settings_or_exit()))


@app.command()
def demo(
    speed: Annotated[
        float, typer.Option(help="Simulated-time speed-up (1: the real pace, about 10 minutes).")
    ] = 5.0,
) -> None:
    """Run the default drill (one replica of four lost, a warm spare ready) and leave the UI up.

    The Temporal Web UI stays up at the end (its address is printed) until Ctrl-C.
    """
    from worker.drill import DEFAULT_SCENARIO, DrillOptions
    from worker.drill_cli import run_drill_command

    s = settings_or_exit()
    options = DrillOptions(scenario=DEFAULT_SCENARIO, speed=speed, keep_up=True)
    _leave(run_drill_command(s, options, json_out=False, wait_after=True))


@app.command()
def drill(
    scenario: Annotated[
        str, typer.Argument(help="Scenario name (see `python -m fleetsim scenarios`) or YAML file.")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    speed: Annotated[float, typer.Option(help="Simulated-time speed-up of the fleet.")] = 1.0,
    auto_approve: Annotated[
        bool, typer.Option("--auto-approve", help="Approve every gate (recorded).")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Wall-clock limit in seconds.")] = 900.0,
    free_ports: Annotated[
        bool,
        typer.Option("--free-ports", help="Pick free ports (beside a running `fleetmend up`)."),
    ] = False,
    no_ramp: Annotated[
        bool,
        typer.Option(
            "--no-ramp",
            help="No gradual ramp: a replacement takes an equal share once ready (recorded).",
        ),
    ] = False,
    rbac: Annotated[
        bool,
        typer.Option(
            "--rbac",
            help="The fleet enforces deploy/rbac.yaml on the worker's token (source checkout).",
        ),
    ] = False,
) -> None:
    """Run a fleetsim scenario end to end on the real stack and report the outcome."""
    from pydantic import ValidationError

    from worker.drill import DrillOptions
    from worker.drill_cli import run_drill_command

    s = settings_or_exit()
    try:
        options = DrillOptions(
            scenario=scenario,
            speed=speed,
            auto_approve=auto_approve,
            timeout_s=timeout,
            free_ports=free_ports,
            ramp=not no_ramp,
            rbac=rbac,
        )
    except ValidationError as exc:
        fail(f"bad option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
    _leave(run_drill_command(s, options, json_out=json_out, wait_after=False))


def _leave(code: int) -> NoReturn:
    # Same reason as _run_operator: skip interpreter finalisation under the Temporal runtime.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@app.command()
def worker() -> None:
    """Run the Temporal worker: the incident workflows and the runbook's activities."""
    s = settings_or_exit()
    _configure_logging(s)
    import asyncio

    from worker.main import WorkerOptions, WorkerSetupError, run_worker

    try:
        options = WorkerOptions()
        asyncio.run(run_worker(s, options=options))
    except WorkerSetupError as exc:
        fail(_one_line(exc))
    except ValidationError as exc:
        fail(f"bad setting: {_first_error(exc, 'FLEETMEND_WORKER_')}")
    except (RuntimeError, OSError) as exc:  # connect failures: one line, not a traceback
        fail(f"worker stopped: {type(exc).__name__}: {_one_line(exc)}")
    # Drained and closed: leave without finalising the SDK's native runtime (see
    # _run_operator), so a clean SIGTERM drain always exits 0.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@app.command()
def intake() -> None:
    """Serve the Alertmanager webhook (POST /alertmanager) and the action boundary (POST /actions)."""
    s = settings_or_exit()
    _configure_logging(s)
    import uvicorn

    from worker.alerts import LabelMapping
    from worker.intake import IntakeOptions, create_app

    try:
        options = IntakeOptions()
    except ValidationError as exc:
        fail(f"bad setting: {_first_error(exc, 'FLEETMEND_INTAKE_')}")
    try:
        mapping = LabelMapping.load()
    except ValidationError as exc:
        fail(f"bad setting: {_first_error(exc, 'FLEETMEND_INTAKE_MAP_')}")
    except ValueError as exc:
        fail(f"bad label mapping: {exc}")
    ledger = None
    if s.database_url is not None:
        from ledger.store import Ledger

        ledger = Ledger.connect(s.database_url, pool_size=4)
    try:
        app_ = create_app(s, options=options, mapping=mapping, actions=ledger)
    except ValueError as exc:
        fail(str(exc))
    # uvicorn handles SIGTERM itself: it stops accepting, finishes in-flight requests, exits.
    uvicorn.run(
        app_,
        host=s.intake_host,
        port=s.intake_port,
        log_level=s.log_level.lower(),
        access_log=False,
        proxy_headers=False,
    )


@app.command()
def status(
    incident: Annotated[str | None, typer.Argument(help="Incident (workflow) id.")] = None,
) -> None:
    """Show an incident's current step, pending gates and timeline (all open ones if no id)."""
    from worker import operator

    s = settings_or_exit()

    async def show() -> None:
        client = await operator.connect(s)
        if incident is None:
            operator.print_renderable(
                operator.render_open_incidents(await operator.open_incidents(client))
            )
            return
        wid = operator.incident_id(incident)
        operator.print_renderable(
            operator.render_status(wid, await operator.incident_status(client, wid))
        )

    _run_operator(show())


@app.command()
def approve(
    incident: Annotated[str, typer.Argument(help="Incident (workflow) id.")],
    gate: Annotated[str, typer.Argument(help="Gate name, as `fleetmend status` lists it.")],
    by: Annotated[str, typer.Option("--by", help="Your name, recorded in the timeline.")],
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approve.")] = False,
    reason: Annotated[str, typer.Option(help="Why, recorded in the timeline.")] = "",
) -> None:
    """Decide a pending approval gate of a running incident."""
    from worker import operator

    s = settings_or_exit()
    if not by.strip():
        fail("--by must name you: the decision is recorded with it")
    wid = operator.incident_id(incident)

    async def decide() -> None:
        client = await operator.connect(s)
        result = await operator.decide_gate(
            client, wid, gate, by=by.strip(), approve=not deny, reason=reason
        )
        verdict = "denied" if deny else "approved"
        outcome = result.get("outcome") if isinstance(result, dict) else None
        shown = f" (recorded: {outcome})" if outcome else ""
        typer.echo(f"{wid}: gate {gate} {verdict} by {by.strip()}{shown}")

    _run_operator(decide())


@app.command()
def reconcile(
    incident: Annotated[str | None, typer.Argument(help="Incident id; all if omitted.")] = None,
) -> None:
    """Compare the ledger with the cluster and gateway; report duplicates, orphans, drift."""
    from worker import operator

    s = settings_or_exit()
    if s.database_url is None:
        fail("FLEETMEND_DATABASE_URL is not set: reconciliation reads the ledger")
    database_url = s.database_url

    async def run() -> None:
        ledger_incident = None
        if incident is not None:
            needs_temporal = "@" not in incident
            client = await operator.connect(s) if needs_temporal else None
            _, ledger_incident = await operator.resolve_incident(client, incident)
        found = operator.reconcile_ledger(database_url, ledger_incident)
        operator.print_renderable(
            operator.render_findings(ledger_incident or "all incidents", found)
        )

    _run_operator(run())


@app.command()
def report(
    incident: Annotated[str, typer.Argument(help="Incident id.")],
    fmt: Annotated[str, typer.Option("--format", help="md, html or json.")] = "md",
    out: Annotated[Path | None, typer.Option(help="Output directory; default reports/.")] = None,
) -> None:
    """Write the incident report: summary, timeline, effects, findings and plots."""
    from worker import operator

    if fmt not in ("md", "html", "json"):
        fail(f"--format must be md, html or json, not {fmt!r}")
    s = settings_or_exit()
    out_dir = out or Path("reports")

    async def run() -> None:
        from ledger.report import write_report

        client = await operator.connect(s)
        workflow_id, ledger_incident = await operator.resolve_incident(None, incident)
        built = await operator.build_report(client, workflow_id, ledger_incident, s.database_url)
        try:
            path = write_report(built, out_dir, fmt)  # type: ignore[arg-type]
        except OSError as exc:
            raise operator.OperatorError(f"cannot write the report: {exc}") from exc
        typer.echo(str(path))

    _run_operator(run())


@app.command()
def settings() -> None:
    """List every FLEETMEND_* setting with its default and meaning."""
    for name, default, description in describe_settings():
        typer.echo(f"{name}={default}\n    {description}")


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Alembic revision.")] = "head",
) -> None:
    """Apply the ledger's Alembic migrations (the only way its schema changes)."""
    s = settings_or_exit()
    if s.database_url is None:
        fail("FLEETMEND_DATABASE_URL is not set (`fleetmend up` sets it for its own stack)")
    from ledger.migrate import upgrade

    try:
        upgrade(s.database_url, revision)
    except Exception as exc:  # one line for the operator; the cause is in the message
        fail(f"db upgrade failed: {type(exc).__name__}: {_one_line(exc)}")
    typer.echo(f"ledger schema at {revision}")


if __name__ == "__main__":
    app()
