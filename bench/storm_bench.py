"""Alert storm: 10,000 alerts in 60 s for 50 pools, with repeats, HA duplicates and resolves.

    python -m bench.storm_bench                      # 10,000 alerts, 60 s, 50 pools
    python -m bench.storm_bench --alerts 400 --seconds 10 --pools 5 --json out.json

Run by `make bench`, never by the unit tests (their smoke test runs 200 alerts over 5
pools). The notifications (bench/storm_plan.py) are posted open-loop at their planned
times to the intake of the real stack (bench/fleet_stack.py), each retried on a 5xx as
Alertmanager would. Measured: intake latency per POST (p50/p99) beside the same intake's
latency for one notification at a time on the quiet stack just before (the baseline),
alerts/s sustained, incidents started (must equal the pools) and alerts lost (must be 0):
an alert is lost when its POST never got a 2xx, or when the pool's incident history in
Temporal lacks its signal (an answer of `resolved_without_incident` counts as recorded:
the intake logs and counts it, as documented).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.fleet_stack import (
    BenchStack,
    PoolRef,
    PostResult,
    cpu_delta,
    format_cpu,
    group_pools,
    load_average,
    percentile,
)
from bench.storm_plan import Notification, Target, group_payload, rounds_for, storm_plan
from worker.alerts import dedupe_key
from workflows.types import SIGNAL_ALERT_RESOLVED, SIGNAL_REPLICA_LOST, AlertResolved, LostReplica

QUIET_SAMPLES = 30
RECORDED = {"started", "signalled", "duplicate", "resolved"}


def _targets(bench: BenchStack, refs: list[PoolRef]) -> list[Target]:
    out = []
    for ref in refs:
        first = bench.fleet.router.table(ref.namespace, ref.pool).endpoints[0].pod
        out.append(Target(ref.namespace, ref.pool, first))
    return out


async def quiet_latency(bench: BenchStack, target: Target, samples: int) -> list[float]:
    """One notification at a time to one open incident: the intake's own latency, unloaded."""
    started = datetime.now(UTC)
    await bench.post(group_payload(target, 0, 3, started, 0))  # opens the incident, untimed
    out = []
    for n in range(samples):
        result = await bench.post(group_payload(target, 0, 3, started, n % 2))
        out.append(result.seconds)
    return out


async def play(bench: BenchStack, plan: list[Notification]) -> tuple[list[PostResult], float]:
    tasks: list[asyncio.Task[PostResult]] = []
    t0 = time.perf_counter()
    for note in plan:
        delay = note.at_s - (time.perf_counter() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(bench.post(note.payload)))
    results = list(await asyncio.gather(*tasks))
    return results, time.perf_counter() - t0


async def runs_started(client: Client, workflow_id: str) -> int:
    """Incident runs Temporal holds for the pool: the truth, whatever the answers said."""
    return len([w async for w in client.list_workflows(f"WorkflowId = '{workflow_id}'")])


async def recorded_keys(client: Client, workflow_id: str) -> set[str]:
    """Dedupe keys of every replica_lost and alert_resolved signal in the incident's history."""
    converter = pydantic_data_converter.payload_converter
    keys: set[str] = set()
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attrs = event.workflow_execution_signaled_event_attributes
        if attrs.signal_name == SIGNAL_REPLICA_LOST:
            lost = converter.from_payloads(attrs.input.payloads, [LostReplica])[0]
            keys.add(dedupe_key(lost.fingerprint, lost.starts_at))
        elif attrs.signal_name == SIGNAL_ALERT_RESOLVED:
            resolved = converter.from_payloads(attrs.input.payloads, [AlertResolved])[0]
            keys.add(dedupe_key(resolved.fingerprint, None))
    return keys


def account(
    plan: list[Notification], results: list[PostResult], histories: dict[str, set[str]]
) -> dict[str, Any]:
    """Outcomes and losses of every alert of every notification."""
    outcomes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    lost = unanswered = rejected = 0
    for note, result in zip(plan, results, strict=True):
        wid = PoolRef(note.target.namespace, note.target.pool).workflow_id
        if not 200 <= result.status < 300:
            unanswered += note.alerts
            errors[f"{result.status}: {result.body.get('error', '')}"] += 1
            continue
        answered = {a["index"]: a for a in result.body.get("accepted", [])}
        rejected += len(result.body.get("rejected", []))
        for index in range(note.alerts):
            accepted = answered.get(index)
            if accepted is None:
                lost += 1
                continue
            outcomes[accepted["outcome"]] += 1
            if accepted["outcome"] in RECORDED and accepted["dedupe_key"] not in histories[wid]:
                lost += 1
    return {
        "outcomes": dict(outcomes),
        "alerts_lost": lost + unanswered + rejected,
        "alerts_unanswered": unanswered,
        "alerts_rejected": rejected,
        "alerts_missing_from_history": lost,
        "errors": dict(errors),
    }


async def measure(
    bench: BenchStack, *, pools: int, alerts: int, seconds: float, quiet_samples: int
) -> dict[str, Any]:
    quiet = await quiet_latency(
        bench, _targets(bench, group_pools("quiet", 1))[0], max(1, quiet_samples)
    )
    refs = group_pools("storm", pools)
    plan = storm_plan(
        _targets(bench, refs), total_alerts=alerts, duration_s=seconds, started=datetime.now(UTC)
    )
    cpu_before = bench.cpu_seconds()
    results, wall = await play(bench, plan)
    cpu_after = bench.cpu_seconds()
    histories = {
        ref.workflow_id: await recorded_keys(bench.client, ref.workflow_id) for ref in refs
    }
    started = sum([await runs_started(bench.client, ref.workflow_id) for ref in refs])
    for ref in refs:
        await bench.terminate(ref, "benchmark: alert storm over")
    latencies = [r.seconds for r in results]
    delivered = sum(n.alerts for n, r in zip(plan, results, strict=True) if 200 <= r.status < 300)
    figures = {
        "pools": pools,
        "alerts_sent": sum(n.alerts for n in plan),
        "notifications": len(plan),
        "planned_s": seconds,
        "wall_s": wall,
        "alerts_per_s_sustained": delivered / wall,
        "retried_posts": sum(1 for r in results if r.attempts > 1),
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "quiet_p50_s": percentile(quiet, 50),
        "quiet_p99_s": percentile(quiet, 99),
        "cpu_s_by_process": cpu_delta(cpu_before, cpu_after),
        **account(plan, results, histories),
    }
    # A retried POST whose first attempt did start the incident answers "signalled": the
    # count comes from Temporal, the intake's answers are shown beside it.
    figures["incidents_started"] = started
    figures["incidents_started_per_answers"] = figures["outcomes"].get("started", 0)
    return figures


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    groups = {"storm": args.pools, "quiet": 1}
    async with BenchStack.open("bench-storm", groups, workdir) as bench:
        figures: dict[str, Any] = {"load_average_at_start": load_average(), **bench.timings}
        figures |= await measure(
            bench,
            pools=args.pools,
            alerts=args.alerts,
            seconds=args.seconds,
            quiet_samples=args.quiet_samples,
        )
        figures["load_average_at_end"] = load_average()
    return figures


def ok(f: dict[str, Any]) -> bool:
    return f["incidents_started"] == f["pools"] and f["alerts_lost"] == 0


def print_table(f: dict[str, Any]) -> None:
    print(
        f"\n{f['alerts_sent']:,} alerts in {f['notifications']:,} notifications planned over "
        f"{f['planned_s']:g} s for {f['pools']} pools (2 Alertmanager replicas); "
        f"1-min load average {f['load_average_at_start']} at start, "
        f"{f['load_average_at_end']} at end\n"
    )
    print("| measure | storm | quiet intake (same run) | ratio |")
    print("|---|---:|---:|---:|")
    for q in ("p50", "p99"):
        storm, quiet = f[f"{q}_s"], f[f"quiet_{q}_s"]
        print(
            f"| intake latency {q} | {storm * 1000:.0f} ms | {quiet * 1000:.1f} ms | "
            f"{storm / quiet:.1f} |"
        )
    print(
        f"| alerts/s sustained | {f['alerts_per_s_sustained']:.0f} "
        f"({f['alerts_sent']:,} in {f['wall_s']:.1f} s) | "
        f"{f['alerts_sent'] / f['planned_s']:.0f} offered | "
        f"{f['alerts_per_s_sustained'] / (f['alerts_sent'] / f['planned_s']):.2f} |"
    )
    print(
        f"| incidents started (runs in Temporal) | {f['incidents_started']} | "
        f"{f['pools']} pools | |"
    )
    print(
        f"| alerts lost | {f['alerts_lost']} | 0 | |\n\noutcomes: {f['outcomes']}; "
        f"POSTs retried after a 5xx: {f['retried_posts']}; unanswered: {f['errors'] or 'none'}"
    )
    cpu = format_cpu(f["cpu_s_by_process"])
    print(f"CPU used during the storm: {cpu} (PostgreSQL not counted)")
    print(f"\ncorrectness (incidents == pools, lost == 0): {'ok' if ok(f) else 'FAILED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alerts", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--quiet-samples", type=int, default=QUIET_SAMPLES)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, help="keep the stack's logs here")
    args = parser.parse_args(argv)
    try:
        # Checked before anything starts: a bad size costs no stack start-up.
        rounds_for(args.alerts, args.pools, senders=2)
    except ValueError as exc:
        parser.error(str(exc))
    if args.seconds <= 0 or args.quiet_samples < 1:
        parser.error("--seconds must be > 0 and --quiet-samples >= 1")
    with tempfile.TemporaryDirectory(prefix="fleetmend-bench-") as tmp:
        figures = asyncio.run(run(args, args.workdir or Path(tmp)))
    print_table(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ok(figures) else 1


if __name__ == "__main__":
    raise SystemExit(main())
