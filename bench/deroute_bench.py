"""Time to deroute: alert POST -> the endpoint out of the router's ready set, end to end.

    python -m bench.deroute_bench                  # 200 incidents, 50 floor samples
    python -m bench.deroute_bench --incidents 20 --json out.json

Run by `make bench`, never by the unit tests (their smoke test runs it at 3 incidents).
Each incident is a pool of its own in a generated fleet (bench/fleet_stack.py): Xid 79
under one of its two replicas (the pod stays Ready, so only fleetmend takes it out), the
alert posted to the intake as Alertmanager would, then intake -> Temporal -> worker ->
ledger -> Kubernetes API (fleetsim) until the router no longer has the endpoint. Incidents
arrive open-loop, one every `--interval` seconds, and each is terminated once derouted
(the rest of its runbook is not what this measures).

The floor, in the same run against the same servers: one direct label PATCH with the
official Kubernetes client until the endpoint is out, plus one ledger insert (`propose`).
Goal: p99 under 1 s and under 10x the floor's p99. The phases of the incidents' time,
read from their Temporal histories, say where it goes.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.fleet_stack import (
    DEROUTE_TIMEOUT_S,
    BenchStack,
    PoolRef,
    cpu_delta,
    format_cpu,
    group_pools,
    load_average,
    percentile,
)
from bench.history_phases import fetch_rows, median_phases, split_phases

GOAL_P99_S = 1.0
GOAL_RATIO = 10.0


async def _floor_sample(bench: BenchStack, api: Any, ledger: Any, ref: PoolRef, n: int) -> float:
    pod = bench.fleet.router.table(ref.namespace, ref.pool).endpoints[0].pod
    out = bench.watch.watch(ref, pod)
    started = time.perf_counter()
    await asyncio.to_thread(
        ledger.propose,
        {
            "op_id": f"bench-floor/{n}",
            "incident_id": "bench-floor",
            "kind": "label-pod",
            "target": f"{ref.namespace}/pod/{pod}",
            "intent": {"labels": {"serving": None}},
        },
    )
    await asyncio.to_thread(
        api.patch_namespaced_pod, pod, ref.namespace, {"metadata": {"labels": {"serving": None}}}
    )
    seconds = await asyncio.wait_for(out, DEROUTE_TIMEOUT_S) - started
    # Put it back (untimed) for the next sample.
    await asyncio.to_thread(
        api.patch_namespaced_pod, pod, ref.namespace, {"metadata": {"labels": {"serving": "true"}}}
    )
    while not bench.watch.in_ready_set(ref, pod):
        await asyncio.sleep(0.01)
    return seconds


async def measure_floor(bench: BenchStack, ref: PoolRef, samples: int) -> list[float]:
    from kubernetes import client as kclient, config as kconfig

    from ledger.store import Ledger

    api = kclient.CoreV1Api(kconfig.new_client_from_config(config_file=str(bench.kubeconfig)))
    ledger = Ledger.connect(bench.database_url, pool_size=1)
    try:
        # One untimed sample first: the client's connection and the statement cache.
        await _floor_sample(bench, api, ledger, ref, -1)
        return [await _floor_sample(bench, api, ledger, ref, n) for n in range(samples)]
    finally:
        ledger.close()
        api.api_client.close()


async def measure_incidents(
    bench: BenchStack, refs: list[PoolRef], interval_s: float
) -> list[dict[str, Any]]:
    tasks = []
    for ref in refs:
        tasks.append(asyncio.create_task(bench.time_to_deroute(ref)))
        await asyncio.sleep(interval_s)
    return list(await asyncio.gather(*tasks))


async def where_the_time_goes(bench: BenchStack, incidents: list[dict[str, Any]]) -> dict[str, Any]:
    """Median phases over all incidents, over the slowest tenth, and the slowest one's."""
    timed = sorted((r for r in incidents if r["seconds"] is not None), key=lambda r: r["seconds"])
    splits = []
    for row in timed:
        rows = await fetch_rows(bench.client, row["pool"])
        splits.append(split_phases(rows, row["posted_wall"], row["out_wall"]))
    if not splits:
        return {}
    tail = splits[len(splits) - max(1, len(splits) // 10) :]
    return {
        "median": median_phases(splits),
        "slowest_tenth_median": median_phases(tail),
        "slowest": splits[-1] | {"total": timed[-1]["seconds"]},
        "slowest_pool": timed[-1]["pool"],
    }


def summarise(floor: list[float], incidents: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["seconds"] for r in incidents if r["seconds"] is not None]
    out: dict[str, Any] = {
        "incidents": len(incidents),
        "derouted": len(times),
        "not_derouted": [r["pool"] for r in incidents if r["seconds"] is None],
        "floor_samples": len(floor),
        "floor_p50_s": percentile(floor, 50),
        "floor_p99_s": percentile(floor, 99),
    }
    if times:
        p99 = percentile(times, 99)
        out |= {
            "p50_s": percentile(times, 50),
            "p99_s": p99,
            "max_s": max(times),
            "ratio_p99_to_floor_p99": p99 / out["floor_p99_s"],
            "goal_p99_under_1s": p99 < GOAL_P99_S,
            "goal_under_10x_floor": p99 < GOAL_RATIO * out["floor_p99_s"],
        }
    return out


def compile_workflows() -> None:
    """Bytecode for `workflows/`, as `pip install` writes it into the deployed image.

    The sandbox imports the workflow's modules afresh for every incident; in a source
    tree without bytecode (this machine sets PYTHONDONTWRITEBYTECODE=1) it compiled
    `replica_loss.py` each time: 27% of the worker's CPU in the baseline profile, a cost
    the image does not have.
    """
    import workflows

    compileall.compile_dir(Path(workflows.__file__).parent, quiet=1)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    groups = {"deroute": args.incidents, "floor": 1}
    if not args.no_bytecode:
        compile_workflows()
    async with BenchStack.open("bench-deroute", groups, workdir) as bench:
        figures: dict[str, Any] = {"load_average_at_start": load_average(), **bench.timings}
        floor = await measure_floor(bench, group_pools("floor", 1)[0], args.floor_samples)
        cpu_before = bench.cpu_seconds()
        incidents = await measure_incidents(
            bench, group_pools("deroute", args.incidents), args.interval
        )
        cpu_after = bench.cpu_seconds()
        figures["cpu_s_by_process"] = cpu_delta(cpu_before, cpu_after)
        figures |= summarise(floor, incidents)
        figures["phases_s"] = await where_the_time_goes(bench, incidents)
        figures["interval_s"] = args.interval
        figures["load_average_at_end"] = load_average()
    return figures


def print_table(f: dict[str, Any]) -> None:
    print(
        f"\n{f['incidents']} incidents, one every {f['interval_s']:g} s; "
        f"1-min load average {f['load_average_at_start']} at start, "
        f"{f['load_average_at_end']} at end\n"
    )
    print("| measure | p50 | p99 | p99 / floor p99 |")
    print("|---|---:|---:|---:|")
    print(
        f"| floor: label PATCH + ledger insert ({f['floor_samples']} samples) | "
        f"{f['floor_p50_s'] * 1000:.1f} ms | {f['floor_p99_s'] * 1000:.1f} ms | 1 |"
    )
    if "p99_s" in f:
        print(
            f"| alert POST -> out of the ready set ({f['derouted']} incidents) | "
            f"{f['p50_s'] * 1000:.0f} ms | {f['p99_s'] * 1000:.0f} ms | "
            f"{f['ratio_p99_to_floor_p99']:.1f} |"
        )
        print(
            f"\ngoal p99 < 1 s: {'met' if f['goal_p99_under_1s'] else 'NOT met'}; "
            f"goal p99 < 10x floor: {'met' if f['goal_under_10x_floor'] else 'NOT met'}"
        )
    if f["not_derouted"]:
        print(f"NOT derouted within {DEROUTE_TIMEOUT_S:.0f} s: {', '.join(f['not_derouted'])}")
    cpu = format_cpu(f["cpu_s_by_process"])
    print(f"\nCPU used during the incidents: {cpu} (PostgreSQL not counted)")
    phases = f["phases_s"]
    if phases:
        print(
            "\nwhere the time goes (per incident, from the Temporal histories; "
            f"the slowest is {phases['slowest_pool']}):\n"
        )
        print("| phase | median ms | slowest tenth, median ms | slowest ms |")
        print("|---|---:|---:|---:|")
        names = dict.fromkeys([*phases["median"], *phases["slowest"]])
        for name in names:
            cells = [
                phases[k].get(name, 0.0) * 1000
                for k in ("median", "slowest_tenth_median", "slowest")
            ]
            print(f"| {name} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incidents", type=int, default=200)
    parser.add_argument("--floor-samples", type=int, default=50)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between alerts")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="leave workflows/ without bytecode (how a source tree under "
        "PYTHONDONTWRITEBYTECODE=1 runs: the sandbox compiles it for every incident)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, help="keep the stack's logs here")
    args = parser.parse_args(argv)
    if args.incidents < 1 or args.floor_samples < 1 or args.interval < 0:
        parser.error("--incidents and --floor-samples must be >= 1, --interval >= 0")
    with tempfile.TemporaryDirectory(prefix="fleetmend-bench-") as tmp:
        figures = asyncio.run(run(args, args.workdir or Path(tmp)))
    print_table(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if not figures["not_derouted"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
