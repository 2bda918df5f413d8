"""The terminal side of `fleetmend drill` and `fleetmend demo`: live timeline, gates, JSON.

Called from `worker/cli.py`. While the drill runs, the screen shows each incident's
timeline (step, elapsed, outcome, evidence) and its pending approval gates with the exact
command and the exact Web UI input that decide them, refreshed a few times a second. With
`--json` the live view goes to stderr and stdout carries one JSON object at the end.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from worker.drill import Drill, DrillError, DrillOptions, DrillResult
from worker.operator import render_status
from worker.settings import Settings

REFRESH_S = 0.25


def approve_hint(workflow_id: str, gate: str) -> tuple[str, str]:
    """The CLI command and the Web UI update input that approve `gate`."""
    command = f"fleetmend approve {workflow_id} {gate} --by $USER"
    ui_input = json.dumps({"gate": gate, "approver": "your-name", "approve": True})
    return command, ui_input


def render_drill(drill: Drill) -> RenderableType:
    parts: list[RenderableType] = []
    head = Table.grid(padding=(0, 2))
    head.add_row(
        Text(f"drill {drill.scenario.name}", style="bold"),
        Text(f"fleet t={drill.fleet.now():7.1f}s  (x{drill.options.speed:g})"),
        Text(f"wall {drill.elapsed_wall():6.1f}s"),
    )
    counters = drill.fleet.counters
    head.add_row(
        Text("requests"),
        Text(
            f"served {counters.served}  late {counters.late}  failed {counters.failed}  "
            f"retried {counters.retried}  terminated {counters.terminated}  shed {counters.shed}"
        ),
        Text(""),
    )
    parts.append(head)
    if drill.observer.lost:
        lost = Table(title="lost endpoints", title_justify="left", expand=False)
        for col in ("pod", "fault at", "alert at", "out of ready set", "time to deroute"):
            lost.add_column(col)
        for key, ep in sorted(drill.observer.lost.items()):
            lost.add_row(
                key,
                f"{ep.fault_at:.1f}s",
                "-" if ep.alert_at is None else f"{ep.alert_at:.1f}s",
                "-" if ep.out_at is None else f"{ep.out_at:.1f}s",
                "-" if ep.time_to_deroute_s is None else f"{ep.time_to_deroute_s:.2f}s",
            )
        parts.append(lost)
    for workflow_id, info in sorted(drill.incidents.items()):
        status = info.get("status")
        if not status:
            parts.append(Text(f"{workflow_id}: starting", style="dim"))
            continue
        body: list[RenderableType] = [render_status(workflow_id, status)]
        for gate in status.get("pending_gates") or []:
            name = str(gate.get("gate"))
            command, ui_input = approve_hint(workflow_id, name)
            body.append(
                Text.assemble(
                    ("gate ", "bold yellow"),
                    (name, "bold"),
                    f": {gate.get('would_do', '')}\n  approve: ",
                    (command, "cyan"),
                    "\n  Web UI (Updates tab, update `approve`): ",
                    (ui_input, "cyan"),
                )
            )
        parts.append(Panel(Group(*body), title=workflow_id, expand=True))
    return Group(*parts)


def run_drill_command(
    settings: Settings, options: DrillOptions, *, json_out: bool, wait_after: bool
) -> int:
    """Run the drill with a live view; returns the process exit code."""
    console = Console(stderr=json_out)
    result: DrillResult | None = None
    last = 0.0

    with Live(console=console, refresh_per_second=4, transient=False) as live:

        def progress(drill: Drill) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= REFRESH_S:
                last = now
                live.update(render_drill(drill))

        async def main() -> tuple[DrillResult, Drill]:
            drill = Drill(settings, options, on_progress=progress)
            try:
                await drill.start()
                await drill._play()
                result = await drill._finish()
                live.update(render_drill(drill))
                return result, drill
            except BaseException:
                await drill.close()
                raise

        try:
            result, _ = asyncio.run(_with_cleanup(main(), wait_after, console))
        except DrillError as exc:
            console.print(f"[red]fleetmend drill: {exc}[/red]")
            return 1
        except KeyboardInterrupt:
            console.print(
                "[yellow]fleetmend drill: interrupted; everything it started is stopped[/yellow]"
            )
            return 130

    if json_out:
        print(result.model_dump_json(indent=2))
    else:
        _print_summary(console, result)
    return 0 if _healthy(result) else 1


async def _with_cleanup(coro: Any, wait_after: bool, console: Console) -> tuple[DrillResult, Drill]:
    result, drill = await coro
    try:
        if wait_after and drill.stack is not None:
            console.print(
                f"\n[bold]Temporal Web UI: {drill.stack.ui_url}[/bold]  "
                f"(incidents: {', '.join(drill.incidents)})\n"
                f"reports: {', '.join(result.report_paths)}\n"
                "The stack stays up so you can look around; Ctrl-C stops it."
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
    finally:
        if drill.stack is not None and wait_after:
            await asyncio.to_thread(drill.stack.stop)
        await drill.close()
    return result, drill


def _healthy(result: DrillResult) -> bool:
    return result.effects.duplicates == 0 and result.effects.orphans == 0


def _print_summary(console: Console, result: DrillResult) -> None:
    table = Table(title=f"drill {result.scenario}: outcome", title_justify="left")
    table.add_column("measure")
    table.add_column("value")
    for incident in result.incidents:
        table.add_row(
            incident.workflow_id,
            f"{incident.severity}, {incident.status} ({incident.outcome})",
        )
    for pod, seconds in result.time_to_deroute_s.items():
        table.add_row(f"time to deroute {pod}", "-" if seconds is None else f"{seconds:.2f} s")
    for pool, seconds in result.time_to_warm_floor_s.items():
        table.add_row(f"time to warm floor {pool}", "-" if seconds is None else f"{seconds:.1f} s")
    for name, value in result.requests.items():
        table.add_row(f"requests {name}", str(value))
    table.add_row(
        "effects",
        f"applied {result.effects.applied}, duplicates {result.effects.duplicates}, "
        f"orphans {result.effects.orphans}, drift {result.effects.drift}",
    )
    table.add_row("approvals", str(len(result.approvals)))
    for path in result.report_paths:
        table.add_row("report", path)
    console.print(table)
