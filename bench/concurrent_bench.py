"""Concurrent incidents: 100 pools lose a replica at the same moment, one worker.

    python -m bench.concurrent_bench                 # 100 incidents
    python -m bench.concurrent_bench --incidents 10 --json out.json

Run by `make bench`, never by the unit tests (their smoke test runs it at 3 incidents).
Every pool of a generated fleet (bench/fleet_stack.py) gets Xid 79 under one replica and
its alert is posted at once, all notifications concurrently, to one intake and one
worker. Measured: the time from the first POST until every endpoint is out of the
router's ready set, and the worker's resident memory from /proc (sampled every 100 ms,
and the kernel's own peak, VmHWM). Baselines from the same run: one incident alone,
before the others, and the worker's idle RSS after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.fleet_stack import (
    BenchStack,
    cpu_delta,
    format_cpu,
    group_pools,
    load_average,
    percentile,
    proc_memory_kib,
)

RSS_SAMPLE_S = 0.1


async def _sample_rss(pid: int, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], proc_memory_kib(pid)["VmRSS"])
        await asyncio.sleep(RSS_SAMPLE_S)


async def measure(bench: BenchStack, incidents: int) -> dict[str, Any]:
    solo = await bench.time_to_deroute(group_pools("solo", 1)[0])
    await asyncio.sleep(1.0)
    pid = bench.worker_pid
    idle_kib = proc_memory_kib(pid)["VmRSS"]
    peak = [idle_kib]
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_rss(pid, peak, stop))
    refs = group_pools("concurrent", incidents)
    cpu_before = bench.cpu_seconds()
    started = time.perf_counter()
    rows = await asyncio.gather(*(bench.time_to_deroute(r, terminate=False) for r in refs))
    all_out_s = time.perf_counter() - started
    cpu_after = bench.cpu_seconds()
    stop.set()
    await sampler
    memory = proc_memory_kib(pid)
    for ref in refs:
        await bench.terminate(ref, "benchmark: all derouted")
    times = [r["seconds"] for r in rows if r["seconds"] is not None]
    out: dict[str, Any] = {
        "incidents": incidents,
        "derouted": len(times),
        "not_derouted": [r["pool"] for r in rows if r["seconds"] is None],
        "solo_s": solo["seconds"],
        "worker_rss_idle_mib": idle_kib / 1024,
        "worker_rss_peak_sampled_mib": peak[0] / 1024,
        "worker_vmhwm_mib": memory["VmHWM"] / 1024,
        # Where the two cores went meanwhile (PostgreSQL's backends are not counted).
        "cpu_s_by_process": cpu_delta(cpu_before, cpu_after),
    }
    if times and len(times) == incidents:
        out["all_derouted_s"] = max(times)
        out["first_post_to_last_out_s"] = all_out_s
        out["p50_s"] = percentile(times, 50)
        out["p99_s"] = percentile(times, 99)
        if solo["seconds"]:
            out["ratio_all_to_solo"] = max(times) / solo["seconds"]
    return out


async def run(incidents: int, workdir: Path, max_activities: int | None) -> dict[str, Any]:
    groups = {"concurrent": incidents, "solo": 1}
    overrides = {} if max_activities is None else {"max_concurrent_activities": max_activities}
    async with BenchStack.open("bench-concurrent", groups, workdir, **overrides) as bench:
        figures: dict[str, Any] = {"load_average_at_start": load_average(), **bench.timings}
        figures["max_concurrent_activities"] = bench.drill.base_settings.max_concurrent_activities
        figures |= await measure(bench, incidents)
        figures["load_average_at_end"] = load_average()
    return figures


def print_table(f: dict[str, Any]) -> None:
    print(
        f"\n{f['incidents']} incidents posted at once to one intake and one worker "
        f"({f['max_concurrent_activities']} activity slots); "
        f"1-min load average {f['load_average_at_start']} at start, "
        f"{f['load_average_at_end']} at end\n"
    )
    print("| measure | figure | baseline (same run) | ratio |")
    print("|---|---:|---:|---:|")
    solo = f["solo_s"]
    if "all_derouted_s" in f:
        ratio = f.get("ratio_all_to_solo")
        print(
            f"| time until all {f['incidents']} derouted | {f['all_derouted_s']:.2f} s | "
            f"{f'{solo:.2f} s' if solo else '-'} (one incident alone) | "
            f"{f'{ratio:.1f}' if ratio else '-'} |"
        )
        print(f"| per-incident p50 / p99 | {f['p50_s']:.2f} s / {f['p99_s']:.2f} s | | |")
    idle = f["worker_rss_idle_mib"]
    print(
        f"| worker RSS peak (sampled every {RSS_SAMPLE_S * 1000:.0f} ms) | "
        f"{f['worker_rss_peak_sampled_mib']:.0f} MiB | {idle:.0f} MiB (idle) | "
        f"{f['worker_rss_peak_sampled_mib'] / idle:.2f} |"
    )
    print(f"| worker VmHWM (kernel's peak) | {f['worker_vmhwm_mib']:.0f} MiB | | |")
    cpu = format_cpu(f["cpu_s_by_process"])
    print(f"\nCPU used meanwhile: {cpu}")
    if f["not_derouted"]:
        print(f"\nNOT derouted: {', '.join(f['not_derouted'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incidents", type=int, default=100)
    parser.add_argument(
        "--max-activities", type=int, help="the worker's activity slots (default: the setting's)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, help="keep the stack's logs here")
    args = parser.parse_args(argv)
    if args.incidents < 1 or (args.max_activities is not None and args.max_activities < 1):
        parser.error("--incidents and --max-activities must be >= 1")
    with tempfile.TemporaryDirectory(prefix="fleetmend-bench-") as tmp:
        figures = asyncio.run(run(args.incidents, args.workdir or Path(tmp), args.max_activities))
    print_table(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if not figures["not_derouted"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
