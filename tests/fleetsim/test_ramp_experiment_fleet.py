"""The ramp experiment's equal share, on fleetsim's own replicas, router and traffic.

fleetsim alone is the runbook's baseline: the workload controller's replacement gets the
router's default weight, an equal share, the moment it is ready. On a colder variant of
`ramp-experiment` (a replacement at 5% of warm, an eighth of the rates, so 8x is cheap)
its requests queue past the 30 s deadline as the request-level model says, and the warm
replicas' never do. The half with fleetmend's ramp needs the whole stack and is
`make ramp-experiment-colder`.
"""

from __future__ import annotations

from pathlib import Path

from bench.ramp_bench import colder_variant, references, started_after_the_fault
from fleetsim.clock import ScaledClock
from fleetsim.fleet import Fleet
from fleetsim.scenario import load_scenario

SPEED = 8.0
SCALE = 0.125
COLD_FRAC = 0.05


async def test_an_equal_share_on_a_cold_replacement_queues_its_requests_past_the_deadline(
    tmp_path: Path,
) -> None:
    scenario = load_scenario(str(colder_variant(tmp_path, scale=SCALE, cold_frac=COLD_FRAC)))
    (traffic,) = scenario.traffic
    (fault,) = scenario.faults
    model = references(scenario)["equal_on_ready"]["requests"]
    rates = scenario.rates
    async with Fleet(scenario, clock=ScaledClock(SPEED)) as fleet:
        fleet.start_script()
        # Past the ready replacement's warm-up, when the model's backlog has drained.
        await fleet.run_until(fault.at + rates.load_s + rates.warmup_s + 60)
        (new,) = started_after_the_fault(fleet)
        counters = fleet.counters
        (generator,) = fleet.traffic
        # A dropped arrival is load the cold replica never saw: it can only lower the waits
        # asserted below, so a few (a stall on a shared machine) leave the finding standing;
        # more would mean the fleet could not keep up, and the run measures nothing.
        assert generator.dropped <= 0.01 * counters.offered, (
            f"the fleet fell behind its clock: {generator.dropped} of {counters.offered} dropped"
        )
        peak_new = counters.max_wait_by_pod[new]
        assert peak_new > traffic.deadline_s
        assert counters.late_by_pod[new] > 0
        assert peak_new > 0.7 * model.peak_wait_new
        # Three warm replicas carry the pool's whole rate while the replacement loads, so
        # they queue for seconds, but never towards the deadline.
        warm = [p for p in counters.max_wait_by_pod if p != new]
        assert all(counters.max_wait_by_pod[p] < traffic.deadline_s / 2 for p in warm), (
            counters.max_wait_by_pod
        )
        assert not any(counters.late_by_pod[p] for p in warm)
