"""The `fleetmend` command: the operator's and the platform engineer's entry point.

Every subcommand loads `worker.settings` first, so a bad FLEETMEND_* value stops here with
one line naming the variable. Errors are one clear line and a non-zero exit, never a
traceback. Commands whose feature is not built yet say so and exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

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
    typer.secho(f"fleetmend: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def not_implemented(command: str) -> NoReturn:
    fail(f"`{command}` is not implemented yet", code=2)


def settings_or_exit() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        fail(f"bad setting: {exc}")


@app.command()
def up() -> None:
    """Start the local stack: PostgreSQL, Temporal dev server + Web UI, worker, intake.

    Uses an embedded PostgreSQL under FLEETMEND_STATE_DIR unless FLEETMEND_DATABASE_URL is
    set. Ctrl-C stops everything it started.
    """
    from worker.stack import run_stack

    sys.exit(run_stack(settings_or_exit()))


@app.command()
def demo() -> None:
    """Run the default drill (one replica of four lost, a warm spare ready) and leave the UI up."""
    not_implemented("demo")


@app.command()
def drill(
    scenario: Annotated[str, typer.Argument(help="Scenario name or YAML file.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    speed: Annotated[float, typer.Option(help="Simulated-time speed-up of the fleet.")] = 1.0,
    auto_approve: Annotated[
        bool, typer.Option("--auto-approve", help="Approve every gate (recorded).")
    ] = False,
) -> None:
    """Run a fleetsim scenario end to end on the real stack and report the outcome."""
    not_implemented("drill")


@app.command()
def worker() -> None:
    """Run the Temporal worker: the incident workflows and the runbook's activities."""
    not_implemented("worker")


@app.command()
def intake() -> None:
    """Serve the Alertmanager webhook (POST /alertmanager) and the action boundary (POST /actions)."""
    not_implemented("intake")


@app.command()
def status(
    incident: Annotated[str | None, typer.Argument(help="Incident (workflow) id.")] = None,
) -> None:
    """Show an incident's current step, pending gates and timeline (all open ones if no id)."""
    not_implemented("status")


@app.command()
def approve(
    incident: Annotated[str, typer.Argument(help="Incident (workflow) id.")],
    gate: Annotated[str, typer.Argument(help="Gate name, as `fleetmend status` lists it.")],
    by: Annotated[str, typer.Option("--by", help="Your name, recorded in the timeline.")],
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approve.")] = False,
    reason: Annotated[str, typer.Option(help="Why, recorded in the timeline.")] = "",
) -> None:
    """Decide a pending approval gate of a running incident."""
    not_implemented("approve")


@app.command()
def reconcile(
    incident: Annotated[str | None, typer.Argument(help="Incident id; all if omitted.")] = None,
) -> None:
    """Compare the ledger with the cluster and gateway; report duplicates, orphans, drift."""
    not_implemented("reconcile")


@app.command()
def report(
    incident: Annotated[str, typer.Argument(help="Incident id.")],
    fmt: Annotated[str, typer.Option("--format", help="md, html or json.")] = "md",
    out: Annotated[Path | None, typer.Option(help="Output file; default under reports/.")] = None,
) -> None:
    """Write the incident report: summary, timeline, effects, findings and plots."""
    not_implemented("report")


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
        fail(f"db upgrade failed: {type(exc).__name__}: {exc}")
    typer.echo(f"ledger schema at {revision}")


if __name__ == "__main__":
    app()
