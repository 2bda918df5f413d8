"""The modules the worker passes through the sandbox are safe to share between runs."""

from __future__ import annotations

import importlib
import types
import typing

import pytest

from worker.sandbox import PASSED_THROUGH, workflow_runner

# Tables read by the workflow and never written: the only containers allowed at module level.
READ_ONLY_TABLES = {"SEARCH_ATTRIBUTES", "ON_TIMEOUT"}
CONSTANTS = (str, int, float, bool, tuple, frozenset, type(None))


def _shared_state(module: types.ModuleType) -> dict[str, str]:
    """Module globals that a run could change and another run would then see."""
    odd = {}
    for name, value in vars(module).items():
        if name.startswith("__") or name in READ_ONLY_TABLES:
            continue
        if isinstance(value, (type, types.FunctionType, types.ModuleType, *CONSTANTS)):
            continue
        if typing.get_origin(value) is not None or type(value).__module__ in (
            "typing",
            "__future__",
        ):
            continue
        if value is getattr(importlib.import_module("datetime"), "UTC", None):
            continue
        odd[name] = type(value).__name__
    return odd


@pytest.mark.parametrize("name", PASSED_THROUGH)
def test_a_module_passed_through_the_sandbox_holds_no_state_a_run_could_change(name: str) -> None:
    assert _shared_state(importlib.import_module(name)) == {}


def test_the_workflow_modules_themselves_stay_sandboxed() -> None:
    restrictions = workflow_runner().restrictions
    for name in ("workflows.replica_loss", "workflows.reconcile", "workflows.saga"):
        assert name not in restrictions.passthrough_modules
    assert set(PASSED_THROUGH) <= restrictions.passthrough_modules


def test_a_module_with_a_mutable_global_is_reported() -> None:
    module = types.ModuleType("scratch")
    module.SEEN = []  # type: ignore[attr-defined]
    assert _shared_state(module) == {"SEEN": "list"}
