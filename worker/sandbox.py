"""The sandbox the worker runs workflows in, and which of our modules it passes through.

Temporal's sandbox imports a workflow's modules afresh for every workflow run, so no run
can see another's module state. For `workflows/types.py` that means building every
pydantic model of the incident again for each incident: 13% of the worker's CPU in the
time-to-deroute benchmark's profile, on the path between the alert and the deroute.
The modules below hold only models, constants and pure functions (no module state a run
could change, no clock, no I/O), so one import serves every run; the workflow modules
themselves (`replica_loss`, `reconcile`, `saga`) stay sandboxed.
"""

from __future__ import annotations

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSED_THROUGH = (
    "workflows.types",
    "workflows.decisions",
    "workflows.opids",
    "workflows.approvals",
    "workflows.retries",
)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The default sandbox, with the pure modules of `workflows/` imported once."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    return SandboxedWorkflowRunner(restrictions=restrictions)
