"""The operation spec: what a caller asks the ledger to do once, validated before any write.

Called from `ledger.store` (which re-validates every spec it is given) and re-exported by
`activities.effects`, so workflows and activities build the same model. This module
imports pydantic only: importing it pulls in neither SQLAlchemy nor Temporal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ledger.errors import InvalidOperationSpec

# RFC 1123 label (namespaces) and subdomain (object and node names), as Kubernetes checks them.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A resource kind as written in a reference: "pod", "service", "leaderworkerset.x-k8s.io".
_KIND = re.compile(r"^[a-z][a-z0-9]*(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OP_KIND = re.compile(r"^[a-z0-9][a-z0-9._:-]{0,62}$")

CLUSTER_SCOPED_KINDS = frozenset(
    {"node", "namespace", "persistentvolume", "storageclass", "clusterrole", "priorityclass"}
)
NAMESPACED_KINDS = frozenset(
    {
        "pod",
        "service",
        "endpointslice",
        "deployment",
        "statefulset",
        "replicaset",
        "leaderworkerset",
        "configmap",
        "gateway",
        "httproute",
        "inferencepool",
        "poddisruptionbudget",
        "event",
    }
)


@dataclass(frozen=True)
class K8sRef:
    """A parsed Kubernetes reference; `namespace` is None for cluster-scoped objects."""

    namespace: str | None
    kind: str
    name: str

    def __str__(self) -> str:
        head = f"{self.namespace}/" if self.namespace else ""
        return f"{head}{self.kind}/{self.name}"


def parse_k8s_ref(target: str) -> K8sRef:
    """Parse "namespace/kind/name" or "kind/name"; raise ValueError saying what is wrong."""
    parts = target.split("/")
    if len(parts) == 3:
        namespace, kind, name = parts
        if not (len(namespace) <= 63 and _DNS_LABEL.match(namespace)):
            raise ValueError(f"{target!r}: namespace {namespace!r} is not an RFC 1123 label")
    elif len(parts) == 2:
        namespace, (kind, name) = None, parts
    else:
        raise ValueError(
            f"{target!r} is not a Kubernetes reference: "
            "write 'namespace/kind/name' or 'kind/name' for cluster-scoped objects"
        )
    if not _KIND.match(kind):
        raise ValueError(f"{target!r}: kind {kind!r} is not a lowercase resource kind")
    if not (len(name) <= 253 and _DNS_SUBDOMAIN.match(name)):
        raise ValueError(f"{target!r}: name {name!r} is not an RFC 1123 subdomain")
    base_kind = kind.split(".", 1)[0]
    if namespace is None and base_kind in NAMESPACED_KINDS:
        raise ValueError(f"{target!r}: {kind} is namespaced; write 'namespace/{kind}/{name}'")
    if namespace is not None and base_kind in CLUSTER_SCOPED_KINDS:
        raise ValueError(f"{target!r}: {kind} is cluster-scoped; write '{kind}/{name}'")
    return K8sRef(namespace, kind, name)


def check_json(value: Any, path: str = "") -> None:
    """Raise ValueError naming the first part of `value` that JSON cannot carry unchanged."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path or 'value'}: {value!r} is not a JSON number")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path or 'value'}: key {key!r} is not a string")
            check_json(item, f"{path}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_json(item, f"{path}[{index}]")
        return
    raise ValueError(f"{path or 'value'}: {type(value).__name__} is not JSON-serialisable")


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    if value != value.strip():
        raise ValueError(f"{value!r} has leading or trailing whitespace")
    if len(value) > 1024:
        raise ValueError("is longer than 1024 characters")
    return value


class OperationSpec(BaseModel):
    """One external effect fleetmend applies at most once, named by a caller-chosen op id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op_id: str  # deterministic: "{workflow_id}/{step}/{target}[/suffix]" chosen by the workflow
    incident_id: str
    kind: str  # "label-pod", "annotate-service", "cordon-node", "scale", "delete-pod", ...
    target: str  # "namespace/kind/name", or "kind/name" for cluster-scoped objects
    intent: dict[str, Any] = Field(default_factory=dict)
    compensates: str | None = None  # op_id this operation undoes
    dry_run: bool = False  # record intent only, apply nothing
    # An emergency measure must be rolled back once the incident ends: reconciliation
    # reports drift while no operation that compensates it is confirmed.
    emergency: bool = False

    @field_validator("op_id", "incident_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return _non_blank(value)

    @field_validator("compensates")
    @classmethod
    def _compensates(cls, value: str | None) -> str | None:
        return None if value is None else _non_blank(value)

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if not _OP_KIND.match(value):
            raise ValueError(f"{value!r} is not an operation kind like 'cordon-node'")
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        parse_k8s_ref(value)
        return value

    @field_validator("intent", mode="before")
    @classmethod
    def _intent(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            check_json(value)
        return value


class ActionSpec(BaseModel):
    """An action an application proposes from an inference request (a tool call, a refund).

    Re-running inference is safe; re-running the action is not. The application picks the
    op id (e.g. "{request_id}/{tool_call_id}") and the ledger answers whether to execute.
    `target` is the application's own reference, not necessarily a Kubernetes object.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    op_id: str
    kind: str
    target: str = ""
    intent: dict[str, Any] = Field(default_factory=dict)
    incident_id: str | None = None

    @field_validator("op_id")
    @classmethod
    def _op_id(cls, value: str) -> str:
        return _non_blank(value)

    @field_validator("incident_id")
    @classmethod
    def _incident(cls, value: str | None) -> str | None:
        return None if value is None else _non_blank(value)

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if not _OP_KIND.match(value):
            raise ValueError(f"{value!r} is not an action kind like 'send-email'")
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        if len(value) > 1024:
            raise ValueError("is longer than 1024 characters")
        return value

    @field_validator("intent", mode="before")
    @classmethod
    def _intent(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            check_json(value)
        return value


SpecT = TypeVar("SpecT", OperationSpec, ActionSpec)


def validate_spec(model: type[SpecT], data: SpecT | Mapping[str, Any]) -> SpecT:
    """Validate (again) and return the spec, or raise InvalidOperationSpec naming the field.

    A model instance is re-validated because pydantic models can be built with
    `model_construct` or copied with `model_copy(update=...)`, both of which skip validation.
    """
    raw: Any = data.__dict__ if isinstance(data, BaseModel) else data
    op_id = raw.get("op_id") if isinstance(raw, Mapping) else None
    try:
        return model.model_validate(dict(raw) if isinstance(raw, Mapping) else raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "spec"
        message = first["msg"].removeprefix("Value error, ")
        raise InvalidOperationSpec(
            field, message, op_id=op_id if isinstance(op_id, str) else None
        ) from exc


def json_safe(value: Any) -> dict[str, Any]:
    """An observed result as JSON, never refusing: it is recorded after the effect happened."""
    if value is None:
        return {}
    cleaned = _jsonable(value)
    return cleaned if isinstance(cleaned, dict) else {"value": cleaned}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item) for item in value]
    if isinstance(value, BaseModel):
        return _jsonable(value.model_dump(mode="json"))
    return str(value)
