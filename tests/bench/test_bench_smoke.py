"""Each end-to-end benchmark at a tiny size on one real stack, so the code cannot rot.

One fleet with every benchmark's pool groups, and the embedded PostgreSQL, the Temporal
dev server, the worker and the intake as child processes (bench/fleet_stack.py). Only the
correctness parts are asserted; the timings are the benchmarks' business (`make bench`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench import concurrent_bench, deroute_bench, storm_bench
from bench.fleet_stack import BenchStack, group_pools

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GROUPS = {"deroute": 3, "floor": 1, "concurrent": 3, "solo": 1, "storm": 5, "quiet": 1}


@pytest.fixture(scope="module")
async def bench(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BenchStack]:
    workdir: Path = tmp_path_factory.mktemp("bench")
    async with BenchStack.open("bench-smoke", GROUPS, workdir) as stack:
        yield stack


async def test_every_incident_is_derouted_and_its_time_is_split_by_phase(
    bench: BenchStack,
) -> None:
    floor = await deroute_bench.measure_floor(bench, group_pools("floor", 1)[0], samples=3)
    incidents = await deroute_bench.measure_incidents(
        bench, group_pools("deroute", 3), interval_s=0.2
    )

    figures = deroute_bench.summarise(floor, incidents)
    assert (figures["derouted"], figures["not_derouted"]) == (3, [])
    assert figures["floor_samples"] == 3
    assert figures["p99_s"] >= figures["p50_s"] > 0
    phases = await deroute_bench.where_the_time_goes(bench, incidents)
    assert "activity deroute_replica: running" in phases["median"]
    assert "intake -> workflow started" in phases["median"]
    # The reads before the deroute run locally, with no task-queue round trip.
    assert "local activity assess_loss" in phases["median"]
    assert phases["slowest"]["total"] == max(r["seconds"] for r in incidents)


async def test_concurrent_incidents_are_all_derouted_and_the_worker_rss_is_read(
    bench: BenchStack,
) -> None:
    figures = await concurrent_bench.measure(bench, incidents=3)

    assert (figures["derouted"], figures["not_derouted"]) == (3, [])
    assert figures["solo_s"] is not None
    assert figures["worker_vmhwm_mib"] >= figures["worker_rss_idle_mib"] > 0
    assert figures["worker_rss_peak_sampled_mib"] >= figures["worker_rss_idle_mib"]


async def test_alert_storm_starts_one_incident_per_pool_and_loses_no_alert(
    bench: BenchStack,
) -> None:
    figures = await storm_bench.measure(bench, pools=5, alerts=200, seconds=4.0, quiet_samples=3)

    assert figures["incidents_started"] == 5, figures
    assert figures["alerts_lost"] == 0, figures
    assert figures["alerts_sent"] == 200
    assert sum(figures["outcomes"].values()) == 200
    assert figures["outcomes"]["resolved"] > 0
