"""A compensation of an operation the ledger never saw undoes nothing and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.common import NOTHING_TO_UNDO, MutatingInput, run_effect
from activities.effects import EffectRunner
from activities.gateway import AnnotationGateway, GatewayActivities

from .conftest import NS, POOL, FleetHandle, scenario
from .test_gateway import restore_input, shed_input


def test_undoing_an_operation_that_never_reached_the_ledger_applies_nothing(
    runner: EffectRunner,
) -> None:
    applied: list[str] = []

    def apply(op_id: str) -> dict[str, Any]:
        applied.append(op_id)
        return {}

    outcome = run_effect(
        runner,
        MutatingInput(op_id="i/undo/never", incident_id="i"),
        kind="restore-shed-tier",
        target=f"{NS}/service/{POOL}",
        intent={"restore_to": "none"},
        apply=apply,
        compensates="i/never",
    )

    assert outcome.state == NOTHING_TO_UNDO and not outcome.applied_now
    assert applied == []
    assert runner.ledger.get("i/undo/never") is None


def test_a_compensation_refused_for_another_reason_still_fails_permanently(
    runner: EffectRunner,
) -> None:
    def effect(op_id: str, intent: dict[str, Any], compensates: str | None = None) -> Any:
        return run_effect(
            runner,
            MutatingInput(op_id=op_id, incident_id="i"),
            kind="shed-tier",
            target=f"{NS}/service/{POOL}",
            intent=intent,
            apply=lambda applied: {},
            compensates=compensates,
        )

    effect("i/shed", {"level": 2})
    assert effect("i/undo", {"restore_to": 0}, compensates="i/shed").applied_now

    with pytest.raises(ApplicationError) as refused:
        effect("i/undo", {"restore_to": 1}, compensates="i/shed")

    assert refused.value.non_retryable and "i/undo" in str(refused.value)


def test_rolling_back_a_shed_tier_that_tightened_nothing_leaves_the_gateway_alone(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    acts = GatewayActivities(AnnotationGateway(handle.api), runner)
    env = ActivityEnvironment()
    calm = env.run(acts.apply_shed_tier, shed_input(max_kv_cache_usage=0.1))
    assert runner.ledger.get("i/shed") is None, "a calm pool is not shed, so nothing is recorded"

    restored = env.run(acts.restore_shed_tier, restore_input(warm_floor_ready=1))

    assert not restored.applied_now
    assert restored.applied == restored.previous == calm.applied
    assert runner.ledger.get("i/rollback/shed") is None
    notes = handle.store.get("services", POOL, namespace=NS)["metadata"].get("annotations") or {}
    assert "gateway.fleetmend.io/shed-tier" not in notes
