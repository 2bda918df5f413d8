"""The intake's OpenAPI 3.1 document, built from the same pydantic models that validate.

Served at `GET /openapi.json` by worker/intake.py and loaded by the property test
(tests/intake/test_intake_properties.py), so the schema the fuzzer generates from is the one
the server enforces, not a hand-written copy that drifts.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from worker.alerts import AlertmanagerWebhook
from worker.intake import ErrorBody, IntakeResult
from worker.intake_actions import (
    ActionAbandon,
    ActionDecision,
    ActionOutcome,
    ActionResultReport,
    ActionSpec,
)

_REF = "#/components/schemas/{model}"


def _collect(models: list[type[BaseModel]], mode: str) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template=_REF, mode=mode)  # type: ignore[arg-type]
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return schemas


def _json(model: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(model=model)}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json("ErrorBody")}


_SECURED: list[dict[str, list[str]]] = [{"bearer": []}, {"basic": []}]


@cache
def openapi_document() -> dict[str, Any]:
    schemas = _collect(
        [AlertmanagerWebhook, ActionSpec, ActionResultReport, ActionAbandon], "validation"
    )
    schemas.update(
        _collect([IntakeResult, ErrorBody, ActionDecision, ActionOutcome], "serialization")
    )
    health = {
        "type": "object",
        "properties": {"status": {"type": "string"}, "temporal": {"type": "string"}},
        "required": ["status"],
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fleetmend intake",
            "version": "1",
            "description": (
                "Alertmanager webhook (payload version 4) -> ReplicaLossWorkflow, and the "
                "ledger's action boundary. 2xx only after Temporal accepted; 503 means retry."
            ),
        },
        "paths": {
            "/alertmanager": {
                "post": {
                    "operationId": "alertmanager_webhook",
                    "summary": "Start or signal the incident of each firing alert's pool.",
                    "security": _SECURED,
                    "requestBody": {"required": True, "content": _json("AlertmanagerWebhook")},
                    "responses": {
                        "200": {
                            "description": "Accepted (all, or the good part of a batch).",
                            "content": _json("IntakeResult"),
                        },
                        "400": _error("The body is not JSON."),
                        "401": _error("No or wrong credentials."),
                        "413": _error("The body is too large."),
                        "422": {
                            "description": "Nothing usable: the envelope or every alert is bad.",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "oneOf": [
                                            {"$ref": _REF.format(model="ErrorBody")},
                                            {"$ref": _REF.format(model="IntakeResult")},
                                        ]
                                    }
                                }
                            },
                        },
                        "503": _error("Temporal unreachable: Alertmanager retries."),
                    },
                }
            },
            "/actions": {
                "post": {
                    "operationId": "propose_action",
                    "summary": "Propose an action by operation id: execute, or already executed.",
                    "security": _SECURED,
                    "requestBody": {"required": True, "content": _json("ActionSpec")},
                    "responses": {
                        "200": {
                            "description": "execute, already_executed (with the result), failed.",
                            "content": _json("ActionDecision"),
                        },
                        "400": _error("The body is not JSON."),
                        "401": _error("No or wrong credentials."),
                        "409": {
                            "description": "in_progress (Retry-After), or the op id names "
                            "another operation.",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "oneOf": [
                                            {"$ref": _REF.format(model="ActionDecision")},
                                            {"$ref": _REF.format(model="ErrorBody")},
                                        ]
                                    }
                                }
                            },
                        },
                        "413": _error("The body is too large."),
                        "422": _error("The proposal is invalid; `field` names what."),
                        "503": _error("The ledger is not reachable or not configured."),
                    },
                }
            },
            "/actions/{operation_id}/result": {
                "post": {
                    "operationId": "result_action",
                    "summary": "Record the result of an executed action.",
                    "security": _SECURED,
                    "parameters": [
                        {
                            "name": "operation_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "requestBody": {"required": True, "content": _json("ActionResultReport")},
                    "responses": {
                        "200": {"description": "Recorded.", "content": _json("ActionOutcome")},
                        "400": _error("The body is not JSON."),
                        "401": _error("No or wrong credentials."),
                        "404": _error("No such operation was proposed."),
                        "409": _error("The operation's state does not allow it."),
                        "413": _error("The body is too large."),
                        "422": _error("The request is invalid."),
                        "503": _error("The ledger is not reachable or not configured."),
                    },
                }
            },
            "/actions/{operation_id}/abandon": {
                "post": {
                    "operationId": "abandon_action",
                    "summary": "Release (or fail for good) an action that was not executed.",
                    "security": _SECURED,
                    "parameters": [
                        {
                            "name": "operation_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "requestBody": {"required": True, "content": _json("ActionAbandon")},
                    "responses": {
                        "200": {
                            "description": "Released or failed.",
                            "content": _json("ActionOutcome"),
                        },
                        "400": _error("The body is not JSON."),
                        "401": _error("No or wrong credentials."),
                        "404": _error("No such operation was proposed."),
                        "409": _error("The operation's state does not allow it."),
                        "413": _error("The body is too large."),
                        "422": _error("The request is invalid."),
                        "503": _error("The ledger is not reachable or not configured."),
                    },
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "The process is up (liveness).",
                    "responses": {
                        "200": {
                            "description": "Up.",
                            "content": {"application/json": {"schema": health}},
                        }
                    },
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "readyz",
                    "security": _SECURED,
                    "summary": "Temporal answers (readiness): no traffic until it does.",
                    "responses": {
                        "200": {
                            "description": "Ready.",
                            "content": {"application/json": {"schema": health}},
                        },
                        "503": {
                            "description": "Temporal unreachable.",
                            "content": {"application/json": {"schema": health}},
                        },
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "security": _SECURED,
                    "summary": "Prometheus exposition.",
                    "responses": {
                        "200": {
                            "description": "Metrics.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
            },
        },
    }
