"""Activity errors: two words a reader understands at once, permanent and temporary.

    ApplicationError (temporalio)
    ├── PermanentError      non-retryable: 403 / 404 / 422, a refused unsafe action,
    │   │                   a missing approval. Retrying cannot change the answer.
    │   └── RefusedError    the activity declined on purpose (e.g. would remove a label
    │                       the workload controller selects on); the message says why.
    └── TemporaryError      retryable: 409 / 429 / 5xx, timeouts, connection errors;
                            a 429's or 503's Retry-After delays the next attempt (at
                            least; never less than the retry policy's own back-off).

Called from every activity module through `k8s_call` (Kubernetes) and `http_errors`
(httpx), so the retry decision is made once, here, from the status code (and the
Retry-After header).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

import httpx
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from activities.redact import redact_url

T = TypeVar("T")

PERMANENT = "PermanentError"
REFUSED = "RefusedError"
TEMPORARY = "TemporaryError"
NON_RETRYABLE_TYPES: tuple[str, ...] = (PERMANENT, REFUSED)

# Kubernetes answers that a retry can change: a conflict (re-read and re-apply), throttling,
# and the server's own failures. Everything else in 4xx describes the request itself.
RETRYABLE_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 405, 410, 422})
MAX_RETRY_AFTER_S = 60.0


class PermanentError(ApplicationError):
    def __init__(self, message: str, *details: object) -> None:
        super().__init__(message, *details, type=PERMANENT, non_retryable=True)


class RefusedError(ApplicationError):
    def __init__(self, message: str, *details: object) -> None:
        super().__init__(message, *details, type=REFUSED, non_retryable=True)


class TemporaryError(ApplicationError):
    """Retryable; `retry_after` (a server's Retry-After) replaces the policy's next back-off."""

    def __init__(
        self, message: str, *details: object, retry_after: timedelta | None = None
    ) -> None:
        super().__init__(
            message, *details, type=TEMPORARY, non_retryable=False, next_retry_delay=retry_after
        )


def classify_status(status: int) -> str:
    """PERMANENT or TEMPORARY for an HTTP status from the Kubernetes API or a gateway."""
    if status in RETRYABLE_STATUSES or status >= 500:
        return TEMPORARY
    if status in PERMANENT_STATUSES or 400 <= status < 500:
        return PERMANENT
    return TEMPORARY


def retry_after(headers: Mapping[str, str] | None) -> timedelta | None:
    """A Retry-After header in seconds (the form the Kubernetes API server sends), capped.

    The cap keeps a confused server from parking an incident; an HTTP date or garbage is
    ignored and the retry policy's own back-off applies.
    """
    value = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not seconds >= 0:  # also NaN
        return None
    return timedelta(seconds=min(seconds, MAX_RETRY_AFTER_S))


def policy_backoff(attempt: int, policy: RetryPolicy | None) -> timedelta:
    """The delay `policy` puts after failed attempt `attempt` (1-based)."""
    if policy is None:
        return timedelta(0)
    delay = policy.initial_interval * (policy.backoff_coefficient ** (attempt - 1))
    ceiling = policy.maximum_interval or policy.initial_interval * 100
    return min(delay, ceiling)


def next_retry_delay(server_asked: timedelta | None) -> timedelta | None:
    """Never sooner than the server asked, never sooner than the retry policy would.

    A Retry-After shorter than the policy's back-off would spend the policy's attempts
    faster than it was written for (eight attempts a second apart ride out nothing).
    """
    if server_asked is None or not activity.in_activity():
        return server_asked
    info = activity.info()
    return max(server_asked, policy_backoff(info.attempt, info.retry_policy))


def k8s_error(exc: BaseException, *, verb: str, obj: str) -> ApplicationError:
    """The activity error for a failed Kubernetes call on `obj` (e.g. "pod serving/llm-0")."""
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        reason = exc.reason or ""
        message = f"kubernetes {verb} {obj}: {status} {reason}".strip()
        if status and classify_status(status) == PERMANENT:
            return PermanentError(message)
        asked = retry_after(exc.headers)
        if asked is not None:
            message += f" (retry after {asked.total_seconds():g}s)"
        return TemporaryError(message, retry_after=next_retry_delay(asked))
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason  # the timeout or refusal itself, not urllib3's wrapper around it
    return TemporaryError(f"kubernetes {verb} {obj}: {type(exc).__name__}: {exc}")


def k8s_call(verb: str, obj: str, fn: Callable[[], T]) -> T:
    """Run one Kubernetes client call, turning its failure into a typed activity error."""
    try:
        return fn()
    except ApiException as exc:
        raise k8s_error(exc, verb=verb, obj=obj) from exc
    except (urllib3.exceptions.HTTPError, OSError, TimeoutError) as exc:
        raise k8s_error(exc, verb=verb, obj=obj) from exc


@contextmanager
def http_errors(verb: str, obj: str) -> Iterator[None]:
    """Map httpx failures (status and transport) to permanent or temporary errors.

    `obj` is often the URL called; its credentials never reach the message."""
    obj = redact_url(obj)
    try:
        yield
    except httpx.HTTPStatusError as exc:
        status = exc.response.status_code
        message = f"{verb} {obj}: HTTP {status}"
        if classify_status(status) == PERMANENT:
            raise PermanentError(message) from exc
        asked = retry_after(exc.response.headers)
        if asked is not None:
            message += f" (retry after {asked.total_seconds():g}s)"
        raise TemporaryError(message, retry_after=next_retry_delay(asked)) from exc
    except httpx.TransportError as exc:
        raise TemporaryError(f"{verb} {obj}: {type(exc).__name__}: {exc}") from exc
