"""`POST /actions`: the ledger's action boundary, served to applications by the intake.

Called by the intake's router (worker/intake.py). Re-running inference is safe; re-running
the action it asked for (a tool call, a refund) is not. An application proposes each
action with its own operation id and gets one of:

- 200 `execute` with a `claim_token`: do it now, then `POST /actions/{op_id}/result`
  (or `/abandon` with the token if it did not happen);
- 200 `already_executed` with the stored `result`: a retry; do not act again;
- 200 `failed` with the recorded `error`: it will never run under this op id;
- 409 `in_progress` with `Retry-After`: another caller holds the claim right now.

The decision is the ledger's (`ledger.store.Ledger.propose_action`), made in one
Postgres transaction, so two callers racing on one op id get one `execute` between them.
The ledger is synchronous (SQLAlchemy); its calls run in a worker thread so the event
loop keeps serving Alertmanager meanwhile.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import DataError, DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ledger.errors import (
    InvalidOperationSpec,
    InvalidTransition,
    OperationConflict,
    OperationFailed,
    UnknownOperation,
)
from ledger.spec import ActionSpec
from ledger.store import ActionDecision, Ledger

log = logging.getLogger("fleetmend.intake.actions")

__all__ = ["ActionDecision", "ActionOutcome", "ActionResultReport", "ActionSpec"]


class ActionResultReport(BaseModel):
    """The result of an action the caller executed after an `execute` decision."""

    model_config = ConfigDict(extra="forbid")

    result: dict[str, Any] = Field(default_factory=dict)


class ActionAbandon(BaseModel):
    """The caller held the claim but did not act: release it, or fail it for good."""

    model_config = ConfigDict(extra="forbid")

    claim_token: str = Field(min_length=1)
    error: str = Field(min_length=1, max_length=2000)
    permanent: bool = False


class ActionOutcome(BaseModel):
    op_id: str
    state: str
    result: dict[str, Any] | None = None


def _problem(
    status: int,
    error: str,
    field: str | None = None,
    detail: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {"error": error}
    if field is not None:
        body["field"] = field
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status_code=status, headers=headers)


async def _authorised_json(request: Request) -> tuple[Any, Response | None]:
    from worker.intake import _authorised, _unauthorised, read_json

    state = request.app.state.intake
    if not _authorised(state, request.headers.get("authorization")):
        return None, _unauthorised(state)
    return await read_json(request)


def _invalid(exc: ValidationError) -> Response:
    err = exc.errors()[0]
    field = ".".join(map(str, err["loc"])) or "body"
    return _problem(422, "invalid request", field, err["msg"])


def _nul_field(value: Any, path: str = "") -> str | None:
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, str):
        return path or "body" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return where
            found = _nul_field(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_field(item, f"{path}.{index}")
            if found:
                return found
    return None


async def _ledger_call(request: Request, call: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one ledger call off the event loop; ledger errors become HTTP answers."""
    ledger: Ledger | None = request.app.state.actions
    if ledger is None:
        return _problem(503, "ledger not configured", detail="set FLEETMEND_DATABASE_URL")
    try:
        return await run_in_threadpool(call, ledger, *args, **kwargs)
    except InvalidOperationSpec as exc:
        return _problem(422, "invalid action", exc.field, str(exc))
    except OperationConflict as exc:
        return _problem(409, "operation id conflict", exc.field, str(exc))
    except UnknownOperation as exc:
        return _problem(404, "unknown operation", exc.field, str(exc))
    except (InvalidTransition, OperationFailed) as exc:
        return _problem(409, "operation state", None, str(exc))
    except DataError:
        # PostgreSQL refuses some values JSON allows (a NUL character in text or jsonb):
        # the request is at fault, and retrying it would fail the same way.
        field = _nul_field(args[0]) if args else None
        return _problem(422, "value the ledger cannot store", field, "NUL characters")
    except DBAPIError as exc:
        log.warning("ledger unreachable: %s", type(exc).__name__)
        return _problem(503, "ledger unreachable", detail=type(exc).__name__)


async def actions_endpoint(request: Request) -> Response:
    raw, problem = await _authorised_json(request)
    if problem is not None:
        return problem
    try:
        spec = ActionSpec.model_validate(raw)
    except ValidationError as exc:
        return _invalid(exc)
    decision = await _ledger_call(request, Ledger.propose_action, spec)
    if isinstance(decision, Response):
        return decision
    body = decision.model_dump(mode="json")
    if decision.decision == "in_progress":
        retry = max(1, round(decision.retry_after or 1))
        return JSONResponse(body, status_code=409, headers={"Retry-After": str(retry)})
    return JSONResponse(body)


async def action_result_endpoint(request: Request) -> Response:
    raw, problem = await _authorised_json(request)
    if problem is not None:
        return problem
    try:
        report = ActionResultReport.model_validate(raw)
    except ValidationError as exc:
        return _invalid(exc)
    op_id = request.path_params["operation_id"]
    record = await _ledger_call(request, Ledger.complete_action, op_id, report.result)
    if isinstance(record, Response):
        return record
    return JSONResponse(
        ActionOutcome(op_id=record.op_id, state=record.state, result=record.result).model_dump(
            mode="json"
        )
    )


async def action_abandon_endpoint(request: Request) -> Response:
    raw, problem = await _authorised_json(request)
    if problem is not None:
        return problem
    try:
        abandon = ActionAbandon.model_validate(raw)
    except ValidationError as exc:
        return _invalid(exc)
    op_id = request.path_params["operation_id"]
    record = await _ledger_call(
        request,
        Ledger.abandon_action,
        op_id,
        claim_token=abandon.claim_token,
        error=abandon.error,
        permanent=abandon.permanent,
    )
    if isinstance(record, Response):
        return record
    return JSONResponse(
        ActionOutcome(op_id=record.op_id, state=record.state, result=record.result).model_dump(
            mode="json"
        )
    )
