"""The runbook's ramp experiment as two drills on the real stack: fleetmend's ramp vs none.

    python -m bench.ramp_bench [--speed 4]        # or: make ramp-experiment

Runs `fleetmend drill ramp-experiment` twice, the scenario built on `ramp_back.py`'s own
parameters (3 warm replicas at 20 req/s carrying 60 req/s, a replacement ready at 25% of
the warm rate that warms over 120 s, a 30 s deadline): once as fleetmend runs it (the
replacement held at the probe share while it loads, then ramped by measured rate), once
with ramping disabled (`--no-ramp`: the router gives it an equal share the moment it is
ready). Each run's late requests are printed beside the runbook's prediction for its
policy (the fluid model, `fleetsim.queueing.simulate_ramp`, which reproduces the
runbook's published table). No gate is approved: the provisioning gate times out to its
safe default, so the replacement is the controller's own, as in the runbook's model.

Exit status 1 unless the ramp leaves 0 late requests and no ramp leaves some.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetsim.queueing import simulate_ramp
from fleetsim.scenario import load_scenario
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


async def run(ramp: bool, speed: float, state_dir: Path) -> dict[str, Any]:
    settings = load_settings(
        state_dir=state_dir,
        gate_timeout_s=GATE_TIMEOUT_S,
        auto_shed_tier_limit=AUTO_SHED_TIER_LIMIT,
    )
    options = DrillOptions(
        scenario=SCENARIO, speed=speed, free_ports=True, ramp=ramp, timeout_s=1200
    )
    drill = Drill(settings, options)
    result = await drill.run()
    counters = drill.fleet.counters
    new = _started_after_the_fault(drill)
    return {
        "ramp": ramp,
        "late": result.requests["late"],
        "served": result.requests["served"],
        "offered": result.requests["offered"],
        "failed": result.requests["failed"],
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


def _started_after_the_fault(drill: Drill) -> list[str]:
    """The serving pods created after the first fault: the replacements."""
    fleet = drill.fleet
    fault_at = fleet.store.epoch + timedelta(seconds=fleet.injected[0].at)
    return sorted(
        p["metadata"]["name"]
        for p in fleet.store.list("pods", namespace="serving")
        if datetime.strptime(p["metadata"]["creationTimestamp"], STAMP).replace(tzinfo=UTC)
        >= fault_at.replace(microsecond=0)
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed", type=float, default=4.0)
    args = parser.parse_args(argv)
    rates = load_scenario(SCENARIO).rates
    predicted = {
        policy: simulate_ramp(
            policy,
            warm_rate=rates.warm_rate,
            cold_frac=rates.cold_frac,
            warmup_s=rates.warmup_s,
        )
        for policy in ("ramp_on_measured_rate", "equal_on_ready")
    }
    runs = []
    # Kept after the run: each drill's reports and logs are the evidence behind the table.
    state = Path(tempfile.mkdtemp(prefix="fleetmend-ramp-bench-"))
    for ramp in (True, False):
        runs.append(asyncio.run(run(ramp, args.speed, state / ("ramp" if ramp else "no-ramp"))))
    print(f"{SCENARIO} at {args.speed:g}x, runbook parameters (fluid model = ramp_back.py)")
    print(
        f"{'policy':<26}{'late':>6}{'late on new':>13}{'peak wait new':>15}"
        f"{'runbook late':>14}{'runbook peak':>14}{'served':>8}{'failed':>8}"
    )
    for r in runs:
        policy = "ramp_on_measured_rate" if r["ramp"] else "equal_on_ready"
        model = predicted[policy]
        print(
            f"{('fleetmend ramp' if r['ramp'] else 'no ramp (--no-ramp)'):<26}{r['late']:>6}"
            f"{r['late_on_new']:>13}{r['peak_wait_new_s']:>14.1f}s{model.late:>14.0f}"
            f"{model.peak_wait_new:>13.1f}s{r['served']:>8}{r['failed']:>8}"
        )
    for r in runs:
        print(
            f"  ramp={r['ramp']}: outcome {r['outcome']}, {r['wall_s']} s wall, "
            f"new {r['new_replicas']}, report {r['report']}"
        )
        for step in r["steps"]:
            print(f"    {step}")
    ramped, equal = runs
    return 0 if ramped["late"] == 0 and equal["late"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
