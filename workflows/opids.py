"""Operation ids: the name under which the ledger applies an effect at most once.

Called from `workflows/replica_loss.py` and `workflows/saga.py` for every mutating
activity. An id is built from the workflow id, the step and the target, plus the incident's
start stamp: the workflow id is reused by the pool's next incident, and without the stamp
the ledger would refuse that incident's effects as already applied. It never contains the
run id, which changes on continue-as-new and would let a replayed step apply twice.
"""

from __future__ import annotations

from datetime import UTC, datetime


def incident_stamp(started_at: datetime) -> str:
    """The incident's start, to the second, as it appears in ids: 20261129T083100Z."""
    return started_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def incident_id(workflow_id: str, started_at: datetime) -> str:
    """One id per incident, stable across continue-as-new and worker restarts."""
    return f"{workflow_id}@{incident_stamp(started_at)}"


def operation_id(incident: str, step: str, target: str) -> str:
    """`{workflow_id}@{stamp}/{step}/{target}`: deterministic, attempt-free, never the run id."""
    if not step or not target:
        raise ValueError("an operation id needs a step and a target")
    return f"{incident}/{step}/{target}"


def compensation_id(forward_op_id: str) -> str:
    """The undo of an operation has its own id, so the ledger applies the undo at most once."""
    return f"{forward_op_id}/compensate"
