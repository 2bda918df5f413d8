"""The process-fault helpers name what is wrong instead of half-doing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker import stack_faults
from worker.settings import load_settings
from worker.stack import Stack, StackError


def idle_stack(tmp_path: Path, **settings: object) -> Stack:
    return Stack(load_settings(state_dir=tmp_path, **settings), ui=False)


def test_killing_a_component_the_stack_does_not_run_names_the_ones_it_runs(
    tmp_path: Path,
) -> None:
    with pytest.raises(StackError, match=r"no worker in this stack \(children: \[\]\)"):
        stack_faults.kill(idle_stack(tmp_path), "worker")


def test_only_the_worker_and_the_intake_are_respawned(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="only worker and intake can be respawned"):
        stack_faults.respawn(idle_stack(tmp_path), "temporal")


def test_a_postgres_the_stack_did_not_start_is_not_restarted(tmp_path: Path) -> None:
    stack = idle_stack(tmp_path, database_url="postgresql+psycopg://u@db.example/fleetmend")
    with pytest.raises(StackError, match="FLEETMEND_DATABASE_URL"):
        stack_faults.restart_postgres(stack)
