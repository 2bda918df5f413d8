"""Hardware triage of a failed node: fault classification and quarantine.

Called from `workflows/replica_loss.py` once the node is out of the serving path.
`classify_fault` is the pure table (Xid, ECC, thermal, driver -> disposition and the
runbook that owns it); `TriageActivities.triage_node` reads the node's DCGM exporter,
classifies, and cordons and labels the node `fleetmend.io/qualified=false` until it passes
qualification.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import MutatingInput, activity_options

Disposition = Literal["replace-gpu", "reboot-node", "restart-process", "capacity-loss", "drain"]
FaultClass = Literal["xid", "ecc", "thermal", "driver"]


class Fault(BaseModel):
    fault_class: FaultClass
    gpu: str | None = None
    xid: int | None = None
    detail: str = ""


class Classification(BaseModel):
    disposition: Disposition
    runbook: str
    reason: str


class TriageInput(MutatingInput):
    node: str
    # Namespaces whose endpoints count as the serving path.
    serving_namespaces: list[str] = Field(default_factory=list)
    # Xid codes already known from the alert (dmesg, DCGM labels), read with the exporter's.
    known_xids: list[int] = Field(default_factory=list)
    dcgm_url: str | None = None


class TriageResult(BaseModel):
    node: str
    faults: list[Fault]
    disposition: Disposition
    runbook: str
    reason: str
    per_fault: list[Classification]
    evidence: dict[str, float] = Field(default_factory=dict)
    cordoned: bool
    qualified_label: str
    applied_now: bool


TRIAGE_OPTIONS = activity_options(start_to_close=120, max_attempts=5)


class TriageActivities:
    """Reads DCGM over HTTP and quarantines the node through the Kubernetes API."""

    @activity.defn
    def triage_node(self, input: TriageInput) -> TriageResult:
        """Refuse while the node serves; classify its faults; cordon and label it."""
        raise NotImplementedError
