"""An incident with no warm spare survives its worker being SIGKILLed while it holds the
replacement at the probe share and while it estimates the provisioning lead time, and
still announces that lead time, once, as a number.

One `no-warm-capacity` drill on the real stack (`tests/faults/read_chaos.py`): the pool's
pod list that `estimate_lead_time` reads first, and the pods `set_router_weights` reads
by name before it writes, are also read by the steps before them, so each such read is
held at a gate until the watcher has seen which activity runs, and the worker is killed
inside theirs. The other read-only activities of this path
(find_replacements, diagnose_pending) are killed in `test_read_faults.py`'s drill.
"""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.faults.gated_reads import Reads
from tests.faults.kill_checks import (
    assert_each_completed_on_a_later_attempt,
    assert_each_write_applied_once,
    assert_killed_as_planned,
    timeline_retries,
)
from tests.faults.read_chaos import ReadChaosDrill, ReadFault
from worker.drill import DrillOptions, DrillResult
from worker.settings import load_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SPEED = 20.0
INCIDENT = "replica-loss/serving/inference-llm"
# The evicted replica's replacement is held at the probe share before provisioning:
# set_router_weights reads each pod's weight first (a pod by name, as deroute did).
PLAN = [
    ReadFault("set_router_weights", gate=Reads("get", "pods")),
    ReadFault("estimate_lead_time", gate=Reads("list", "pods")),
]


class Run:
    def __init__(self, drill: ReadChaosDrill, result: DrillResult) -> None:
        self.drill = drill
        self.result = result
        self.status = drill.final_status[INCIDENT]
        self.writes = drill.fleet.kube_server.mutations.summary()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    options = DrillOptions(
        scenario="no-warm-capacity", speed=SPEED, free_ports=True, auto_approve=True, timeout_s=420
    )
    settings = load_settings(state_dir=tmp_path_factory.mktemp("provision-faults"))
    drill = ReadChaosDrill(settings, options, plan=PLAN)
    return Run(drill, await drill.run())


def test_the_worker_was_killed_while_the_weights_were_read_and_the_lead_time_estimated(
    run: Run,
) -> None:
    assert_killed_as_planned(run.drill, PLAN)
    held = {k.fault.key: k.detail["held_read"] for k in run.drill.killed}
    assert held["estimate_lead_time"] == "pods serving"
    assert held["set_router_weights"].startswith("pods serving/inference-llm-")


def test_the_incident_completes_on_provisioned_capacity(run: Run) -> None:
    (incident,) = run.result.incidents
    assert incident.status == "COMPLETED"
    assert incident.outcome in ("recovered", "recovered-measures-kept")
    (provision,) = [e for e in run.status.timeline if e.step == "provision"]
    # Approved (the drill approves every gate), so it scaled: the estimate's retry fed it.
    assert provision.evidence["replicas"] > provision.evidence["previous_replicas"]
    assert set(run.result.routed_after_deroute.values()) == {0}


def test_each_killed_activity_completed_on_a_later_attempt_and_the_timeline_shows_it(
    run: Run,
) -> None:
    killed = {f.activity for f in PLAN}
    assert_each_completed_on_a_later_attempt(run.drill, INCIDENT, killed)
    assert timeline_retries(run.status) >= killed


def test_the_lead_time_was_announced_once_as_a_number(run: Run) -> None:
    announced = [n for n in run.drill.channel.received if n.milestone == "lead-time"]
    (message,) = announced
    assert isinstance(message.fact("provisioning lead time"), int | float)
    assert (
        run.drill.channel.receipts.count(
            next(k for k in run.drill.channel.receipts if k.endswith("/lead-time"))
        )
        == 1
    )


def test_no_effect_was_applied_twice(run: Run) -> None:
    assert_each_write_applied_once(run.writes, run.result)
