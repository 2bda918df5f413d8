"""API errors as Kubernetes reports them: an HTTP code plus a `Status` body.

    ApiError                 any failure the API server answers with a Status
    ├── BadRequest           400 (undecodable body or patch, unsupported field selector)
    ├── Forbidden            403 (RBAC denies the verb on the resource)
    ├── NotFound             404 (object or resource type missing)
    ├── MethodNotAllowed     405
    ├── Conflict             409 (stale resourceVersion)
    ├── AlreadyExists        409
    ├── Gone                 410 (watch from a resourceVersion no longer kept)
    ├── UnsupportedMediaType 415 (patch type the resource does not accept)
    └── Invalid              422 (validation failed, patch could not be applied)

Raised by the store, validation and patching; the server turns each into a response,
and Python callers of the store catch them like the official client's ApiException.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    code = 500
    reason = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        kind: str | None = None,
        group: str | None = None,
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.name = name
        self.kind = kind
        self.group = group
        self.causes = causes

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name is not None:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind is not None:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            body["details"] = details
        return body


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Gone(ApiError):
    code = 410
    reason = "Expired"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"


def not_found(plural: str, name: str, group: str = "") -> NotFound:
    qualified = f"{plural}.{group}" if group else plural
    return NotFound(f'{qualified} "{name}" not found', name=name, kind=plural, group=group)


def conflict(plural: str, name: str, group: str = "") -> Conflict:
    qualified = f"{plural}.{group}" if group else plural
    return Conflict(
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        name=name,
        kind=plural,
        group=group,
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> Invalid:
    """422 naming each bad field the way the API server does: `field: message`."""
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    qualified = f"{kind}.{group}" if group else kind
    return Invalid(
        f'{qualified} "{name}" is invalid: {text}',
        name=name,
        kind=kind,
        group=group,
        causes=[{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
    )
