"""Every recorded history replays on the current code, so a breaking change fails CI.

The histories come from `tests/histories/record.py`, one per shipped scenario shape (and
one file per run of a continued-as-new incident).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from tests.histories.record import INDEX, SCENARIOS
from tests.workflows.reordered import ReorderedReplicaLossWorkflow
from worker.sandbox import workflow_runner
from workflows.reconcile import ReconcileWorkflow
from workflows.replica_loss import ReplicaLossWorkflow

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
WORKFLOW_IDS: dict[str, str] = json.loads((HISTORIES / INDEX).read_text())
FILES = sorted(p for p in HISTORIES.glob("*.json") if p.name != INDEX)


def history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(WORKFLOW_IDS[path.name], path.read_text())


def test_every_shipped_scenario_has_a_recorded_history() -> None:
    recorded = {p.name.split(".")[0] for p in FILES}
    assert recorded == set(SCENARIOS)
    assert len([p for p in FILES if p.name.startswith("continue_as_new.run")]) > 1


WORKFLOW_SOURCE = Path(__file__).resolve().parents[2] / "workflows" / "replica_loss.py"


def patches_in_code() -> set[str]:
    return set(re.findall(r'workflow\.patched\("([^"]+)"\)', WORKFLOW_SOURCE.read_text()))


def patches_recorded(path: Path) -> set[str]:
    """The patch ids the run's history marks as taken (Temporal's `core_patch` markers)."""
    taken: set[str] = set()
    for event in json.loads(path.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if not marker or marker.get("markerName") != "core_patch":
            continue
        for payload in marker["details"]["patch-data"]["payloads"]:
            taken.add(json.loads(base64.b64decode(payload["data"]))["id"])
    return taken


def test_every_patch_has_a_history_through_it_and_one_from_before_it() -> None:
    runs = [p for p in FILES if ".run" in p.name]
    assert patches_in_code()
    for patch in patches_in_code():
        assert any(patch in patches_recorded(p) for p in runs), f"no history takes {patch!r}"
        assert any(patch not in patches_recorded(p) for p in runs), (
            f"no history from before {patch!r}"
        )


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
async def test_a_recorded_history_replays_on_the_current_workflow_code(path: Path) -> None:
    replayer = Replayer(
        workflows=[ReplicaLossWorkflow, ReconcileWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )
    await replayer.replay_workflow(history(path))


async def test_a_reordered_runbook_fails_the_replay_of_a_running_incident() -> None:
    replayer = Replayer(
        workflows=[ReorderedReplicaLossWorkflow], data_converter=pydantic_data_converter
    )
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(history(HISTORIES / "warm_spare_recovery.run1.json"))
