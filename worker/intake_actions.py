"""`POST /actions`: the ledger's action boundary, for applications outside the workflow.

Called by the intake's router (worker/intake.py). An application about to perform an
external action proposes it with its own operation id; the answer is `execute` (first
time: go ahead, then report the result with `POST /actions/{operation_id}/result`) or
`already_executed` with the stored result (a retry: do not act again). The decision is
made by the ledger (ledger/store.py) in one transaction, so two callers racing on one
operation id get one `execute` between them.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


class ActionProposal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation_id: str = Field(min_length=1, max_length=512, pattern=r"^\S+$")
    action: str = Field(min_length=1, max_length=200, description="What the caller will do.")
    target: str = Field("", max_length=512, description="What it acts on.")
    incident_id: str | None = Field(None, max_length=512)
    intent: dict[str, Any] = Field(default_factory=dict, description="Arguments, stored as is.")


class ActionResultReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    result: dict[str, Any] = Field(default_factory=dict)


class ActionDecision(BaseModel):
    operation_id: str
    decision: Literal["execute", "already_executed", "in_progress"]
    result: dict[str, Any] | None = None


class ActionBoundary(Protocol):
    """What the intake needs from the ledger; ledger/store.py provides the implementation."""

    async def propose(self, proposal: ActionProposal) -> ActionDecision: ...

    async def record_result(self, operation_id: str, result: dict[str, Any]) -> ActionDecision: ...


class UnknownOperation(LookupError):
    """A result was reported for an operation id nobody proposed."""


def _problem(
    status: int, error: str, field: str | None = None, detail: str | None = None
) -> Response:
    body: dict[str, Any] = {"error": error}
    if field is not None:
        body["field"] = field
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status_code=status)


async def _authorised_json(request: Request) -> tuple[Any, Response | None]:
    from worker.intake import _authorised, _unauthorised, read_json

    state = request.app.state.intake
    if not _authorised(state, request.headers.get("authorization")):
        return None, _unauthorised(state)
    return await read_json(request)


async def actions_endpoint(request: Request) -> Response:
    raw, problem = await _authorised_json(request)
    if problem is not None:
        return problem
    try:
        proposal = ActionProposal.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        return _problem(422, "invalid action", ".".join(map(str, err["loc"])) or "body", err["msg"])
    boundary: ActionBoundary | None = request.app.state.actions
    if boundary is None:
        return _problem(503, "ledger not configured", detail="set FLEETMEND_DATABASE_URL")
    decision = await boundary.propose(proposal)
    return JSONResponse(decision.model_dump(mode="json"))


async def action_result_endpoint(request: Request) -> Response:
    raw, problem = await _authorised_json(request)
    if problem is not None:
        return problem
    try:
        report = ActionResultReport.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        return _problem(422, "invalid result", ".".join(map(str, err["loc"])) or "body", err["msg"])
    boundary: ActionBoundary | None = request.app.state.actions
    if boundary is None:
        return _problem(503, "ledger not configured", detail="set FLEETMEND_DATABASE_URL")
    operation_id = request.path_params["operation_id"]
    try:
        decision = await boundary.record_result(operation_id, report.result)
    except UnknownOperation:
        return _problem(404, "unknown operation", "operation_id", "propose it first")
    return JSONResponse(decision.model_dump(mode="json"))
