"""The runbook's ramp experiment on the real stack: fleetmend's ramp against an equal share.

The bundled `ramp-experiment` keeps `ramp_back.py`'s parameters, under which each
request's own wait on the cold replica peaks at 26.6 s, under the 30 s deadline (the
runbook's 31 s is its backlog over the current rate; `bench.ramp_bench` runs that one).
CI runs the same experiment with a colder replacement, where the equal share's requests
really do go late (the runbook's case 5: the damage grows with coldness), at an eighth of
the rates and 16x, so the two drills fit in CI's budget. Waits do not change with the
rates' scale: a backlog and the rate draining it scale together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.ramp_bench import run
from fleetsim.scenario import SCENARIO_DIR, load_scenario

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPEED = 16.0
SCALE = 0.125
COLD_FRAC = 0.05


def colder_variant(directory: Path) -> Path:
    data: dict[str, Any] = yaml.safe_load((SCENARIO_DIR / "ramp-experiment.yaml").read_text())
    data["name"] = "ramp-experiment-colder"
    data["rates"]["warm_rate"] *= SCALE
    data["rates"]["cold_frac"] = COLD_FRAC
    for traffic in data["traffic"]:
        traffic["rate"] *= SCALE
    path = directory / "ramp-experiment-colder.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def test_the_ramp_leaves_nothing_late_where_an_equal_share_overruns_the_deadline(
    drill_dir: Path,
) -> None:
    scenario = colder_variant(drill_dir)
    (traffic,) = load_scenario(str(scenario)).traffic
    ramped = await run(True, SPEED, drill_dir / "ramp", str(scenario))
    equal = await run(False, SPEED, drill_dir / "no-ramp", str(scenario))
    # A fleet that fell behind its clock drops arrivals and proves nothing.
    for r in (ramped, equal):
        assert r["dropped"] == 0, r
        assert len(r["new_replicas"]) == 1, r
    assert ramped["late"] == 0, ramped
    assert ramped["peak_wait_new_s"] < traffic.deadline_s / 2, ramped
    assert equal["late_on_new"] > 0, equal
    assert equal["peak_wait_new_s"] > traffic.deadline_s, equal
