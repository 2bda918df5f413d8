"""An incident survives its worker being SIGKILLed in every mutating step, a Temporal
restart and a PostgreSQL restart, and applies each effect exactly once.

One `replica-lost` drill on the real stack (`tests/faults/chaos.py`): fleetsim holds the
first Kubernetes write of each mutating activity, and while that activity is blocked in
it the worker is SIGKILLed (then the write goes through, unrecorded, and a new worker
starts), or PostgreSQL is restarted on its data directory, or the Temporal dev server is
restarted on its SQLite file while an alert is posted to the intake. Effects are counted
by fleetsim's API server, not by the ledger under test. The drill runs once for the module
(about three and a half minutes on 2 cores); each test reads one property of it.
"""

from __future__ import annotations

from collections import Counter

import pytest
import pytest_asyncio

from tests.faults.chaos import ChaosDrill, Fault
from worker.drill import DrillOptions, DrillResult
from worker.settings import load_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SPEED = 20.0
INCIDENT = "replica-loss/serving/inference-llm"

# In runbook order: each mutating activity of a warm-spare recovery, by its op id.
PLAN = [
    Fault("deroute_replica", "/deroute/"),
    Fault("apply_shed_tier", "/protect/shed-tier"),
    Fault("apply_retry_contract", "/inflight/"),
    Fault("promote_warm", "/promote-warm/"),
    Fault("scale_pool", "/rebuild-warm-floor/"),
    Fault("triage_node", "/triage/"),
    Fault("ramp_traffic", "/ramp/inference-llm/step-1"),
    Fault("ramp_traffic", "/ramp/inference-llm/step-2", "restart-postgres"),
    Fault("ramp_traffic", "/ramp/inference-llm/step-3", "restart-temporal"),
    Fault("restore_shed_tier", "/roll-back/shed-tier"),
]


class Run:
    def __init__(self, drill: ChaosDrill, result: DrillResult) -> None:
        self.drill = drill
        self.result = result
        self.status = drill.final_status[INCIDENT]
        self.writes = drill.fleet.kube_server.mutations.summary()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    options = DrillOptions(
        scenario="replica-lost", speed=SPEED, free_ports=True, auto_approve=True, timeout_s=420
    )
    state_dir = tmp_path_factory.mktemp("faults")
    drill = ChaosDrill(load_settings(state_dir=state_dir), options, plan=PLAN)
    return Run(drill, await drill.run())


def test_every_fault_struck_while_its_activity_was_blocked_in_its_write(run: Run) -> None:
    assert run.drill.chaos_error is None
    assert run.drill.missed == []
    assert [s.fault for s in run.drill.struck] == PLAN
    for struck in run.drill.struck:
        assert struck.fault.op_id_contains in struck.op_id
        assert struck.op_id.startswith(INCIDENT + "@")


def test_the_incident_completes_and_recovers(run: Run) -> None:
    (incident,) = run.result.incidents
    assert (incident.status, incident.outcome) == ("COMPLETED", "recovered")
    assert set(run.result.routed_after_deroute.values()) == {0}


def test_fleetsim_saw_each_effect_written_exactly_once_per_object(run: Run) -> None:
    per_object: dict[str, int] = run.writes["by_op_id_and_object"]
    assert per_object, "no stamped write reached fleetsim"
    assert {k: n for k, n in per_object.items() if n != 1} == {}
    for struck in run.drill.struck:
        assert per_object[f"{struck.op_id} {struck.object}"] == 1


def test_the_ledger_agrees_nothing_was_duplicated_or_left_behind(run: Run) -> None:
    effects = run.result.effects
    assert (effects.duplicates, effects.orphans, effects.drift) == (0, 0, 0)
    stamped = {op for op in run.writes["by_op_id"]}
    assert effects.applied >= len({op.rsplit("/step-", 1)[0] for op in stamped})


def test_the_timeline_shows_each_retried_step_with_its_attempt(run: Run) -> None:
    retried: Counter[str] = Counter()
    for entry in run.status.timeline:
        for _target, attempt in entry.retried.items():
            assert attempt > 1
            retried[entry.step] += 1
    killed_steps = {
        s.op_id.split("Z/", 1)[1].split("/", 1)[0]
        for s in run.drill.struck
        if s.fault.action == "kill-worker"
    }
    assert killed_steps <= set(retried), f"retried: {dict(retried)}"


def test_an_alert_posted_while_temporal_restarts_is_not_lost(run: Run) -> None:
    (temporal,) = [s for s in run.drill.struck if s.fault.action == "restart-temporal"]
    assert temporal.detail["alert_sent_while_down"] is True
    assert temporal.detail["alert"] is None, f"never accepted: {temporal.detail['alert']}"
    resolved = [e for e in run.status.timeline if e.step == "alert-resolved"]
    assert len(resolved) == 1
    assert run.drill.delivery_errors == []


def test_postgres_came_back_on_the_same_data_directory(run: Run) -> None:
    (postgres,) = [s for s in run.drill.struck if s.fault.action == "restart-postgres"]
    assert postgres.detail["postgres_down_s"] >= 1.0
