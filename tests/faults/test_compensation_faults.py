"""An aborted incident survives its worker being SIGKILLed while it demotes the warm spare
it promoted, and still undoes each of its effects exactly once.

One `replica-lost` drill on the real stack (`tests/faults/abort_chaos.py`): once the
incident has promoted the warm spare and rebuilt the warm floor, an operator aborts it
while it diagnoses pending pods (a read, held in fleetsim until the abort is sent); the
saga unwinds newest first, and fleetsim holds the first write
of `demote_warm` (the compensation of `promote_warm`, operation id
`.../promote-warm/{pool}/compensate`) while the worker is SIGKILLed; the write then goes
through unrecorded and a new worker retries the undo. Effects are counted by fleetsim's
API server, not by the ledger under test. The drill runs once for the module.

`force_delete_pod` and `relocate_misplaced_pod` are reached by no drill (README, Process
faults); their kills are activity-level tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from tests.faults.abort_chaos import OPERATOR, AbortIn, AbortingChaosDrill
from tests.faults.chaos import Fault
from tests.faults.gated_reads import Reads
from tests.faults.kill_checks import assert_each_write_applied_once, timeline_retries
from worker.drill import DrillOptions, DrillResult
from worker.settings import load_settings
from workflows.types import IncidentStatus, TimelineEntry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SPEED = 20.0
POOL = "inference-llm"
INCIDENT = f"replica-loss/serving/{POOL}"
# The reschedule step's read, after rebuild-warm-floor: the saga holds promote_warm's undo
# under scale_pool's. Only diagnose_pending lists events.
ABORT_IN = AbortIn("diagnose_pending", Reads("list", "events"))
PLAN = [Fault("demote_warm", f"/promote-warm/{POOL}/compensate")]


@dataclass
class Run:
    drill: AbortingChaosDrill
    result: DrillResult

    @property
    def status(self) -> IncidentStatus:
        return self.drill.final_status[INCIDENT]

    @property
    def writes(self) -> dict[str, Any]:
        return self.drill.fleet.kube_server.mutations.summary()

    @property
    def compensate(self) -> TimelineEntry:
        (entry,) = [e for e in self.status.timeline if e.step == "compensate"]
        return entry


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    # Gates are approved: when pressure asks for a shed tier beyond the automatic limit,
    # the escalation is one more measure the abort must undo (and the ledger link).
    options = DrillOptions(
        scenario="replica-lost", speed=SPEED, free_ports=True, auto_approve=True, timeout_s=420
    )
    settings = load_settings(state_dir=tmp_path_factory.mktemp("compensation-faults"))
    drill = AbortingChaosDrill(settings, options, plan=PLAN, abort_in=ABORT_IN)
    return Run(drill, await drill.run())


def test_the_worker_was_killed_inside_the_demote_warm_write_of_the_unwinding(run: Run) -> None:
    assert run.drill.chaos_error is None
    assert run.drill.missed == []
    (struck,) = run.drill.struck
    assert struck.fault == PLAN[0]
    assert struck.op_id.startswith(INCIDENT + "@")
    assert struck.op_id.endswith(f"/promote-warm/{POOL}/compensate")
    assert struck.object.startswith(f"pods/serving/{POOL}-")
    assert struck.detail["new_pid"] != struck.detail["killed_pid"]


def test_the_incident_ends_aborted_after_the_operators_abort(run: Run) -> None:
    assert run.drill.aborted == {INCIDENT: "events serving"}
    (incident,) = run.result.incidents
    assert (incident.status, incident.outcome) == ("COMPLETED", "aborted")
    assert OPERATOR in run.compensate.evidence["why"]


def test_every_compensation_owed_was_done_and_none_failed(run: Run) -> None:
    saga = run.status.compensations
    owed = [c for c in saga if not c.discharged]
    assert {c.activity for c in owed} >= {"demote_warm", "scale_pool"}
    assert [(c.activity, c.error) for c in owed if not c.done or c.error] == []
    assert run.compensate.evidence["failed"] == []
    assert run.compensate.outcome == f"{len([c for c in saga if c.done])} undone"


def test_the_promoted_spare_was_demoted_before_the_warm_floor_scale_was_undone_newest_first(
    run: Run,
) -> None:
    undone = [e.activity for e in run.status.effects if e.compensation]
    assert undone.index("scale_pool") < undone.index("demote_warm")


def test_the_timeline_shows_the_killed_undo_and_the_attempt_that_finished_it(run: Run) -> None:
    assert "demote_warm" in timeline_retries(run.status)
    assert run.compensate.retried.get(POOL, 1) > 1
    (undo,) = [e for e in run.status.effects if e.compensation and e.activity == "demote_warm"]
    assert undo.attempt > 1


def test_no_effect_or_undo_was_applied_twice(run: Run) -> None:
    assert_each_write_applied_once(run.writes, run.result)
    (struck,) = run.drill.struck
    assert run.writes["by_op_id_and_object"][f"{struck.op_id} {struck.object}"] == 1
