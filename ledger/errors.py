"""What can go wrong in the ledger, as one exception tree.

    LedgerError                      base; `.permanent` says whether a retry can help
    ├── InvalidOperationSpec         a spec field is missing or malformed; `.field` names it
    ├── OperationConflict            an op id already names a different operation; `.field`
    ├── UnknownOperation             no operation with that op id
    ├── InvalidTransition            the operation's state does not allow the change asked for
    ├── OperationFailed              the operation is recorded as failed; it is never re-applied
    └── OperationInProgress          another worker holds the claim and its lease is live (temporary)

    PermanentEffectError             raised *by an apply callable*: the effect was refused for good
                                     (e.g. a 422 from the API server); the ledger records `failed`

Called from `ledger.store`, `ledger.reconcile` and `activities.effects`; activities map
`permanent` errors to non-retryable Temporal failures.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error the ledger raises."""

    permanent: bool = True

    def __init__(self, message: str, *, op_id: str | None = None) -> None:
        super().__init__(message)
        self.op_id = op_id


class InvalidOperationSpec(LedgerError, ValueError):
    """A spec was refused before anything was written; `field` names the bad field."""

    def __init__(self, field: str, message: str, *, op_id: str | None = None) -> None:
        super().__init__(f"{field}: {message}", op_id=op_id)
        self.field = field


class OperationConflict(LedgerError):
    """The op id is already recorded with a different incident, kind, target or intent.

    Op ids are chosen by the caller; reusing one for another effect is a bug in the caller,
    and applying it would make the ledger lie about what was done.
    """

    def __init__(self, op_id: str, field: str, recorded: object, proposed: object) -> None:
        super().__init__(
            f"op {op_id!r} is already recorded with {field}={recorded!r}, "
            f"not {field}={proposed!r}: an op id names exactly one operation",
            op_id=op_id,
        )
        self.field = field


class UnknownOperation(LedgerError, KeyError):
    def __init__(self, op_id: str, *, field: str = "op_id") -> None:
        super().__init__(f"{field}: no operation {op_id!r} in the ledger", op_id=op_id)
        self.field = field

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class InvalidTransition(LedgerError):
    def __init__(self, op_id: str, state: str, wanted: str) -> None:
        super().__init__(f"op {op_id!r} is {state}; it cannot become {wanted}", op_id=op_id)
        self.state = state
        self.wanted = wanted


class OperationFailed(LedgerError):
    """The operation was recorded as failed; the ledger will not apply it again."""

    def __init__(self, op_id: str, error: str | None) -> None:
        super().__init__(f"op {op_id!r} failed: {error or 'no error recorded'}", op_id=op_id)
        self.error = error


class OperationInProgress(LedgerError):
    """Another worker claimed the operation and its lease has not expired. Retry later."""

    permanent = False

    def __init__(self, op_id: str, retry_after: float) -> None:
        super().__init__(
            f"op {op_id!r} is being applied by another worker; retry in {retry_after:.1f}s",
            op_id=op_id,
        )
        self.retry_after = retry_after


class PermanentEffectError(Exception):
    """Raised by an apply callable when the effect can never succeed as specified.

    The ledger records the operation as `failed` with this message and re-raises; any
    other exception from `apply` leaves the operation `proposed` for a retry.
    """
