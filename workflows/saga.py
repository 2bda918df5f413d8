"""The compensation stack of one incident, kept inside IncidentState.

Called from `workflows/replica_loss.py`. A mutating step registers its compensation
*before* it acts, so a failure, a cancellation or an abort that lands mid-activity still
undoes whatever the activity managed to apply. Compensations run newest first, each with
its own operation id (`{forward op id}/compensate`) so the ledger applies each undo at most
once, however often the unwinding itself is retried or replayed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.workflow import ActivityConfig

from workflows.opids import compensation_id
from workflows.types import Compensation, IncidentState

with workflow.unsafe.imports_passed_through():
    from activities.cluster import (
        DEMOTE_WARM_OPTIONS,
        SCALE_OPTIONS,
        DemoteWarmInput,
        ScaleInput,
    )
    from activities.gateway import (
        RESTORE_SHED_TIER_OPTIONS,
        ROUTER_WEIGHTS_OPTIONS,
        RestoreShedTierInput,
        RouterWeightsInput,
    )

# Activity name -> (input model, options): a compensation is stored as data in the state
# (so continue-as-new carries it) and turned back into a typed call here.
COMPENSATORS: dict[str, tuple[type[BaseModel], ActivityConfig]] = {
    "restore_shed_tier": (RestoreShedTierInput, RESTORE_SHED_TIER_OPTIONS),
    "demote_warm": (DemoteWarmInput, DEMOTE_WARM_OPTIONS),
    "scale_pool": (ScaleInput, SCALE_OPTIONS),
    "set_router_weights": (RouterWeightsInput, ROUTER_WEIGHTS_OPTIONS),
}


def register(
    state: IncidentState, *, forward_op_id: str, step: str, target: str, undo: BaseModel
) -> Compensation:
    """Push the undo of `forward_op_id` (idempotent: registering twice keeps the first)."""
    for entry in state.saga:
        if entry.forward_op_id == forward_op_id:
            return entry
    activity = _activity_name(undo)
    entry = Compensation(
        forward_op_id=forward_op_id,
        op_id=compensation_id(forward_op_id),
        step=step,
        target=target,
        activity=activity,
        input=undo.model_dump(mode="json"),
    )
    state.saga.append(entry)
    return entry


def refine(entry: Compensation, undo: BaseModel) -> None:
    """Replace the undo once the forward result told us the prior value it must restore."""
    entry.input = undo.model_dump(mode="json")


def discharge_all(state: IncidentState) -> None:
    """The incident ended well: its effects are the recovery, not something to undo."""
    for entry in state.saga:
        if not entry.done:
            entry.discharged = True


def discharge(state: IncidentState, forward_op_id: str) -> None:
    """The runbook undid this effect itself (roll-back step): the saga must not do it again."""
    for entry in state.saga:
        if entry.forward_op_id == forward_op_id:
            entry.discharged = True


def to_unwind(state: IncidentState) -> Iterator[Compensation]:
    """Compensations still owed, newest first."""
    for entry in reversed(state.saga):
        if not entry.done and not entry.discharged:
            yield entry


def is_noop(entry: Compensation) -> bool:
    """An undo with nothing to undo (the forward act reported no prior value to restore)."""
    if entry.activity == "set_router_weights":
        return not entry.input.get("weights")
    if entry.activity == "demote_warm":
        return not entry.input.get("pods")
    return False


def call_of(entry: Compensation) -> tuple[BaseModel, ActivityConfig]:
    """The typed input and the options to run one compensation with."""
    model, options = COMPENSATORS[entry.activity]
    data: dict[str, Any] = dict(entry.input)
    data["op_id"] = entry.op_id
    return model.model_validate(data), options


_BY_MODEL = {model: name for name, (model, _) in COMPENSATORS.items()}


def _activity_name(undo: BaseModel) -> str:
    try:
        return _BY_MODEL[type(undo)]
    except KeyError:
        raise ValueError(f"{type(undo).__name__} is not a known compensation input") from None
