"""Cool-down and half-open: a probe share first, full share only after serving it in the SLO."""

from __future__ import annotations

import itertools

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, status_of


@pytest.mark.parametrize(
    ("cooldown_max_s", "expected"), [(300.0, [30.0, 60.0, 120.0]), (100.0, [30.0, 60.0, 100.0])]
)
async def test_a_failed_probe_doubles_the_cool_down_up_to_its_bound_before_the_full_share(
    ts_env: WorkflowEnvironment, task_queue: str, cooldown_max_s: float, expected: list[float]
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead, spare = f"{fleet.pool}-0", f"{fleet.pool}-warm-0"
    fleet.kill(dead)
    fleet.probe_ttft[spare] = [3.0, 3.0, 0.4]
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(
            client, task_queue, fleet, loss_of(fleet, dead), cooldown_max_s=cooldown_max_s
        )
        result = await handle.result()
        status = await status_of(handle)
    probes = [e for e in status.timeline if e.step == "half-open"]
    assert [e.outcome for e in probes] == ["failed", "failed", "passed"]
    assert [e.evidence["cooldown_s"] for e in probes] == expected
    # Each retry waited its cool-down in workflow time before probing again.
    gaps = [(b.started_at - a.started_at).total_seconds() for a, b in itertools.pairwise(probes)]
    assert gaps[0] >= expected[1] and gaps[1] >= expected[2]
    ops = [op for op in fleet.applied if f"/ramp/{spare}/" in op]
    assert sorted(op.rsplit("/", 1)[1] for op in ops) == ["cool-2", "cool-3", "probe-2", "probe-3"]
    assert fleet.pods[spare].weight == 250  # the full, rate-weighted share after the pass
    assert result.outcome == "recovered"


async def test_a_replica_that_never_serves_its_probe_within_the_slo_is_held_back_at_no_share(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead, spare = f"{fleet.pool}-0", f"{fleet.pool}-warm-0"
    fleet.kill(dead)
    fleet.probe_ttft[spare] = [3.0] * 4
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, dead), max_probes=4)
        await handle.result()
        status = await status_of(handle)
    assert [e.outcome for e in status.timeline if e.step == "half-open"] == ["failed"] * 4
    assert any(op.endswith(f"/ramp/{spare}/held-back") for op in fleet.applied)
    ramp = next(e for e in status.timeline if e.step == "ramp")
    assert ramp.evidence["completed"] is True
