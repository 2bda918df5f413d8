"""The runbook's ramp experiment as two drills on the real stack: fleetmend's ramp vs none.

    python -m bench.ramp_bench [--speed 1]        # or: make ramp-experiment
    python -m bench.ramp_bench --colder [--speed 2]   # or: make ramp-experiment-colder
    python -m bench.ramp_bench --colder --cold-frac 0.05 --scale 0.125 --speed 8

Runs `fleetmend drill ramp-experiment` twice, the scenario built on `ramp_back.py`'s own
parameters (3 warm replicas at 20 req/s carrying 60 req/s, a replacement ready at 25% of
the warm rate that warms over 120 s, a 30 s deadline): once as fleetmend runs it (the
replacement held at the floor share while it loads, probed at what its warm-up measured
it serves, then ramped by measured rate), once
with ramping disabled (`--no-ramp`: the router gives it an equal share the moment it is
ready). No gate is approved: the provisioning gate times out to its safe default, so the
replacement is the controller's own, as in the runbook's model.

Each run is printed beside two references for its policy: the runbook's own figures
(`fleetsim.queueing.simulate_ramp`, whose wait is the backlog over the replica's current
rate) and the same queue request by request (`simulate_ramp_requests`, each request's
own FIFO wait while the rate climbs), which is what the drill's replicas measure. The
traffic generator's worst release lag and the arrivals it dropped as overdue show
whether the fleet kept up with the clock's speed; a run that did not is not evidence.

`--colder` runs the same pair with a replacement at 10% of warm (at half the rates),
where the equal share's requests really go late; `--cold-frac` and `--scale` choose
another start and rate scale (5% at an eighth of the rates is the start that went late
under a fixed 10% probe share).

Exit status 1 unless the ramp leaves 0 late requests, the equal share's peak wait on the
new replica reaches 80% of the request-level model's (with `--colder`, also past the
deadline with late requests on it), and neither run dropped arrivals or failed requests
for an empty ready set (fleetsim's probes timing out in a stalled loop).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetsim.fleet import Fleet
from fleetsim.queueing import RampResult, simulate_ramp, simulate_ramp_requests
from fleetsim.scenario import SCENARIO_DIR, Scenario, load_scenario
from worker.drill import Drill, DrillOptions
from worker.settings import load_settings

SCENARIO = "ramp-experiment"
# Fleet seconds a gate waits before its safe default applies: nothing scaled (the
# replacement is the controller's own) and no shedding beyond the automatic limit.
GATE_TIMEOUT_S = 8.0
# The runbook's model has no admission control: shedding halves max_tokens, which would
# double a replica's throughput and halve the queue the experiment is about.
AUTO_SHED_TIER_LIMIT = 0
STAMP = "%Y-%m-%dT%H:%M:%SZ"
# The equal share's peak wait must reach this share of the request-level model's.
# fleetsim's router's reason for a request that found the ready set empty.
NO_ENDPOINT = "no endpoint"
MIN_PEAK_FRACTION = 0.8
# `--colder`: the experiment with a replacement at 10% of warm, where the equal share's
# requests really go late, at half the rates. Waits do not change with
# the rates' scale (a backlog and the rate draining it scale together).
COLDER_FRAC = 0.1
COLDER_SCALE = 0.5


def colder_variant(
    directory: Path, *, scale: float = COLDER_SCALE, cold_frac: float = COLDER_FRAC
) -> Path:
    """Write a colder variant of the bundled scenario under `directory`: the
    replacement starts at `cold_frac` of warm, the rates are `scale` times the runbook's."""
    data: dict[str, Any] = yaml.safe_load((SCENARIO_DIR / f"{SCENARIO}.yaml").read_text())
    data["name"] = f"{SCENARIO}-colder"
    data["rates"]["warm_rate"] *= scale
    data["rates"]["cold_frac"] = cold_frac
    for traffic in data["traffic"]:
        traffic["rate"] *= scale
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def run(
    ramp: bool, speed: float, state_dir: Path, scenario: str = SCENARIO
) -> dict[str, Any]:
    settings = load_settings(
        state_dir=state_dir,
        gate_timeout_s=GATE_TIMEOUT_S,
        auto_shed_tier_limit=AUTO_SHED_TIER_LIMIT,
    )
    rates = load_scenario(scenario).rates
    options = DrillOptions(
        scenario=scenario,
        speed=speed,
        free_ports=True,
        ramp=ramp,
        timeout_s=1200,
        # Traffic goes on after the incident closes until a backlog the equal share built
        # on the cold replica has drained: requests still queued when the drill stops
        # would be counted nowhere.
        settle_s=rates.warmup_s,
    )
    drill = Drill(settings, options)
    result = await drill.run()
    counters = drill.fleet.counters
    new = started_after_the_fault(drill.fleet)
    return {
        "ramp": ramp,
        "late": result.requests["late"],
        "served": result.requests["served"],
        "offered": result.requests["offered"],
        "failed": result.requests["failed"],
        "failed_by_reason": dict(counters.failed_by_reason),
        "max_lag_s": max((g.max_lag_s for g in drill.fleet.traffic), default=0.0),
        "dropped": sum(g.dropped for g in drill.fleet.traffic),
        "new_replicas": new,
        "late_on_new": sum(counters.late_by_pod.get(p, 0) for p in new),
        "peak_wait_new_s": max((counters.max_wait_by_pod.get(p, 0.0) for p in new), default=0.0),
        "outcome": [i.outcome for i in result.incidents],
        # A step that did not end "done" (or a gate's decision), for a reader of the table.
        "steps": [
            f"{s.step}: {s.outcome}"
            for i in result.incidents
            for s in i.steps
            if s.outcome not in ("done", "live", "passed")
        ],
        "wall_s": result.wall_s,
        "report": result.report_paths[0] if result.report_paths else None,
    }


def started_after_the_fault(fleet: Fleet) -> list[str]:
    """The serving pods created after the first fault: the replacements."""
    fault_at = fleet.store.epoch + timedelta(seconds=fleet.injected[0].at)
    return sorted(
        p["metadata"]["name"]
        for p in fleet.store.list("pods", namespace="serving")
        if datetime.strptime(p["metadata"]["creationTimestamp"], STAMP).replace(tzinfo=UTC)
        >= fault_at.replace(microsecond=0)
    )


def references(scenario: Scenario) -> dict[str, dict[str, RampResult]]:
    """Per policy, the runbook's fluid figures and the request-level FIFO figures."""
    rates, (traffic,) = scenario.rates, scenario.traffic
    kw = {
        "arrival": traffic.rate,
        "warm_rate": rates.warm_rate,
        "cold_frac": rates.cold_frac,
        "warmup_s": rates.warmup_s,
        "deadline_s": traffic.deadline_s,
    }
    return {
        policy: {
            "runbook": simulate_ramp(policy, **kw),  # type: ignore[arg-type]
            "requests": simulate_ramp_requests(policy, **kw),  # type: ignore[arg-type]
        }
        for policy in ("ramp_on_measured_rate", "equal_on_ready")
    }


def reproduced(runs: list[dict[str, Any]], scenario: Scenario, *, colder: bool) -> list[str]:
    """Why the runs do not reproduce the experiment; empty when they do. The colder
    variant must also put the equal share's requests past the deadline."""
    ramped, equal = runs
    model_peak = references(scenario)["equal_on_ready"]["requests"].peak_wait_new
    deadline = scenario.traffic[0].deadline_s
    why = []
    if ramped["late"]:
        why.append(f"fleetmend's ramp left {ramped['late']} late requests")
    if colder and not (equal["late_on_new"] > 0 and equal["peak_wait_new_s"] > deadline):
        why.append(
            f"equal share: {equal['late_on_new']} late on the new replica, peak wait "
            f"{equal['peak_wait_new_s']:.1f} s: not past the {deadline:g} s deadline"
        )
    if equal["peak_wait_new_s"] < MIN_PEAK_FRACTION * model_peak:
        why.append(
            f"equal share: peak wait {equal['peak_wait_new_s']:.1f} s on the new replica, "
            f"under {MIN_PEAK_FRACTION:.0%} of the request-level model's {model_peak:.1f} s"
        )
    for r in runs:
        if r["dropped"]:
            why.append(
                f"ramp={r['ramp']}: {r['dropped']} arrivals dropped as overdue: the fleet "
                "did not keep up with the clock (lower --speed)"
            )
        # Every replica out of the ready set at once: fleetsim's own probes timed out in a
        # stalled event loop (it happens before the fault too), not the policy's doing.
        if no_endpoint := r["failed_by_reason"].get(NO_ENDPOINT, 0):
            why.append(
                f"ramp={r['ramp']}: {no_endpoint} requests failed with no endpoint in the "
                "ready set: the fleet's probes timed out on every replica (lower --speed)"
            )
    return why


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--speed",
        type=float,
        default=None,
        help="simulated seconds per second (default 1 at the runbook's rates, 2 with --colder)",
    )
    parser.add_argument(
        "--colder",
        action="store_true",
        help="a replacement at 10%% of warm, half the rates: the equal share goes late",
    )
    parser.add_argument(
        "--cold-frac",
        type=float,
        default=COLDER_FRAC,
        help="with --colder: the replacement's rate at ready, as a fraction of warm",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=COLDER_SCALE,
        help="with --colder: the rates as a multiple of the runbook's (waits do not change)",
    )
    args = parser.parse_args(argv)
    if not (0 < args.cold_frac <= 1 and args.scale > 0):
        parser.error(
            f"--cold-frac must be in (0, 1] and --scale > 0, got {args.cold_frac} and {args.scale}"
        )
    # 60 req/s at 2x fell behind the clock on two shared cores; half the rates did not.
    speed = args.speed or (2.0 if args.colder else 1.0)
    # Kept after the run: each drill's reports and logs are the evidence behind the table.
    state = Path(tempfile.mkdtemp(prefix="fleetmend-ramp-bench-"))
    ref = (
        str(colder_variant(state, scale=args.scale, cold_frac=args.cold_frac))
        if args.colder
        else SCENARIO
    )
    scenario = load_scenario(ref)
    predicted = references(scenario)
    runs = [
        asyncio.run(run(ramp, speed, state / ("ramp" if ramp else "no-ramp"), ref))
        for ramp in (True, False)
    ]
    print(f"{scenario.name} at {speed:g}x")
    print(
        f"{'policy':<22}{'late':>6}{'late new':>10}{'peak new':>10}"
        f"{'runbook':>9}{'peak':>7}{'requests':>10}{'peak':>7}"
        f"{'served':>8}{'failed':>8}{'lag':>7}{'dropped':>9}"
    )
    for r in runs:
        policy = "ramp_on_measured_rate" if r["ramp"] else "equal_on_ready"
        book, fifo = predicted[policy]["runbook"], predicted[policy]["requests"]
        print(
            f"{('fleetmend ramp' if r['ramp'] else 'no ramp (--no-ramp)'):<22}{r['late']:>6}"
            f"{r['late_on_new']:>10}{r['peak_wait_new_s']:>9.1f}s"
            f"{book.late:>9.0f}{book.peak_wait_new:>6.1f}s"
            f"{fifo.late:>10.0f}{fifo.peak_wait_new:>6.1f}s"
            f"{r['served']:>8}{r['failed']:>8}{r['max_lag_s']:>6.2f}s"
            f"{r['dropped']:>9}"
        )
    print(
        "  runbook = ramp_back.py's figures (wait = backlog / current rate); requests = the "
        "same queue request by request (each request's own FIFO wait)"
    )
    for r in runs:
        print(
            f"  ramp={r['ramp']}: outcome {r['outcome']}, {r['wall_s']} s wall, "
            f"new {r['new_replicas']}, report {r['report']}"
        )
        for reason, n in r["failed_by_reason"].items():
            print(f"    failed: {n} {reason}")
        for step in r["steps"]:
            print(f"    {step}")
    why = reproduced(runs, scenario, colder=args.colder)
    for line in why:
        print(f"NOT REPRODUCED: {line}")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
