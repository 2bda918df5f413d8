"""Hardware triage of a failed node: fault classification and quarantine.

Called from `workflows/replica_loss.py` once the node is out of the serving path.
`classify_fault` is the pure table (Xid, ECC, thermal, driver -> disposition and the
runbook that owns it); `TriageActivities.triage_node` reads the node's DCGM exporter,
classifies, and cordons and labels the node `fleetmend.io/qualified=false` until it passes
qualification.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.cluster import ClusterActivities, pod_ready
from activities.common import MUTATING_HEARTBEAT_S, MutatingInput, MutatingResult, activity_options
from activities.errors import RefusedError
from activities.metrics import MetricSnapshot, scrape

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
    # Faults the alert already named (a driver or module failure has no DCGM metric).
    reported_faults: list[Fault] = Field(default_factory=list)
    dcgm_url: str | None = None


class TriageResult(MutatingResult):
    node: str
    faults: list[Fault]
    disposition: Disposition
    runbook: str
    reason: str
    per_fault: list[Classification]
    evidence: dict[str, float] = Field(default_factory=dict)
    dcgm_error: str | None = None
    cordoned: bool
    qualified_label: str
    applied_now: bool


TRIAGE_OPTIONS = activity_options(
    start_to_close=120, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=8
)


# ---------------------------------------------------------------------------- classification

RUNBOOK_GPU_FAULT = "gpu-fault"
RUNBOOK_THERMAL = "thermal-emergency"
RUNBOOK_DRIVER = "driver-module-load-failure"

# Xid -> (disposition, why). The dispositions follow NVIDIA's Xid catalogue and seed 002
# (section 10.2); an Xid not listed drains the node for a human, the safe unknown.
XID_TABLE: dict[int, tuple[Disposition, str]] = {
    13: ("restart-process", "graphics engine exception: application or driver bug"),
    31: ("restart-process", "GPU memory page fault: application or driver bug"),
    43: ("restart-process", "GPU stopped processing: application or driver bug"),
    45: ("restart-process", "preemptive cleanup after an earlier error"),
    48: ("replace-gpu", "double-bit ECC error"),
    61: ("reboot-node", "internal micro-controller breakpoint"),
    62: ("reboot-node", "internal micro-controller halt"),
    63: ("capacity-loss", "ECC page retirement or row remap recorded: memory capacity lost"),
    64: ("replace-gpu", "ECC page retirement or row remap failed"),
    74: ("drain", "NVLink error: multi-GPU replicas on this node are unsafe"),
    79: ("reboot-node", "GPU has fallen off the bus"),
    92: ("drain", "high single-bit ECC error rate: the memory is degrading"),
    94: ("restart-process", "contained ECC error: only the affected process is lost"),
    95: ("reboot-node", "uncontained ECC error: the GPU needs a reset"),
    119: ("reboot-node", "GSP RPC timeout"),
    120: ("reboot-node", "GSP error"),
}

# Worst first: when a node shows several faults, the most drastic disposition wins.
DISPOSITION_ORDER: tuple[Disposition, ...] = (
    "replace-gpu",
    "reboot-node",
    "drain",
    "capacity-loss",
    "restart-process",
)

THERMAL_LIMIT_C = 85.0
MEMORY_XIDS = frozenset({48, 63, 64, 92, 94, 95})


def classify_fault(fault: Fault) -> Classification:
    """Disposition and owning runbook of one fault (pure; table-tested)."""
    if fault.fault_class == "xid":
        if fault.xid is None:
            return Classification(
                disposition="drain", runbook=RUNBOOK_GPU_FAULT, reason="Xid without a code"
            )
        disposition, why = XID_TABLE.get(fault.xid, ("drain", "Xid not in the table"))
        return Classification(
            disposition=disposition, runbook=RUNBOOK_GPU_FAULT, reason=f"Xid {fault.xid}: {why}"
        )
    if fault.fault_class == "ecc":
        uncorrectable = "uncorrectable" in fault.detail or "double-bit" in fault.detail
        return Classification(
            disposition="replace-gpu" if uncorrectable else "drain",
            runbook=RUNBOOK_GPU_FAULT,
            reason=f"ECC: {fault.detail or 'errors reported'}",
        )
    if fault.fault_class == "thermal":
        return Classification(
            disposition="drain",
            runbook=RUNBOOK_THERMAL,
            reason=f"thermal: {fault.detail or 'over temperature'}",
        )
    return Classification(
        disposition="reboot-node",
        runbook=RUNBOOK_DRIVER,
        reason=f"driver: {fault.detail or 'driver or module failure'}",
    )


def classify_node(faults: list[Fault]) -> tuple[Classification, list[Classification]]:
    """The node's disposition: the worst of its faults' (drain when nothing was found)."""
    per_fault = [classify_fault(f) for f in faults]
    if not per_fault:
        # The node was lost and shows nothing: it still needs qualification before serving.
        return (
            Classification(
                disposition="drain",
                runbook=RUNBOOK_GPU_FAULT,
                reason="no fault visible: qualify before return",
            ),
            [],
        )
    worst = min(per_fault, key=lambda c: DISPOSITION_ORDER.index(c.disposition))
    return worst, per_fault


def faults_from_dcgm(
    snapshot: MetricSnapshot, known_xids: list[int] | None = None
) -> tuple[list[Fault], dict[str, float]]:
    """Faults in one DCGM exporter scrape, and the numbers they were read from."""
    faults: list[Fault] = []
    evidence: dict[str, float] = {}
    seen_xids: set[tuple[str | None, int]] = set()
    for labels, value in snapshot.rows("DCGM_FI_DEV_XID_ERRORS"):
        gpu = labels.get("gpu")
        if value > 0:
            evidence[f"xid.gpu{gpu}"] = value
            seen_xids.add((gpu, int(value)))
            faults.append(Fault(fault_class="xid", gpu=gpu, xid=int(value)))
    for xid in known_xids or []:
        if not any(code == xid for _, code in seen_xids):
            faults.append(Fault(fault_class="xid", xid=xid, detail="from the alert"))
    # An Xid that is itself a memory error already accounts for the ECC counts it bumped.
    explained = {gpu for gpu, code in seen_xids if code in MEMORY_XIDS}
    for labels, value in snapshot.rows("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"):
        gpu = labels.get("gpu")
        if value > 0:
            evidence[f"ecc_dbe_volatile.gpu{gpu}"] = value
            if gpu not in explained:
                faults.append(
                    Fault(fault_class="ecc", gpu=gpu, detail=f"uncorrectable {value:g} (volatile)")
                )
    for labels, value in snapshot.rows("DCGM_FI_DEV_GPU_TEMP"):
        gpu = labels.get("gpu")
        evidence[f"temp_c.gpu{gpu}"] = value
        if value >= THERMAL_LIMIT_C:
            faults.append(
                Fault(
                    fault_class="thermal",
                    gpu=gpu,
                    detail=f"{value:g} C >= {THERMAL_LIMIT_C:g} C",
                )
            )
    return faults, evidence


class TriageActivities:
    """Reads DCGM over HTTP and quarantines the node through the Kubernetes API."""

    def __init__(self, cluster: ClusterActivities, http: httpx.Client) -> None:
        self.cluster = cluster
        self.http = http
        self.s = cluster.s

    def _pods_on_node(self, node: str) -> list[Any]:
        pods = self.cluster._call(
            "list",
            f"pods on node {node}",
            self.cluster.core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node}",
        )
        return [p for p in pods.items or [] if p.spec is not None and p.spec.node_name == node]

    def _serving(self, pods: list[Any], namespaces: list[str]) -> list[str]:
        s = self.s
        serving = []
        for p in pods:
            if namespaces and p.metadata.namespace not in namespaces:
                continue
            labels = p.metadata.labels or {}
            if labels.get(s.router_label) == s.router_label_value and pod_ready(p):
                serving.append(f"{p.metadata.namespace}/{p.metadata.name}")
        return serving

    def _dcgm_url(self, input: TriageInput, pods: list[Any]) -> str | None:
        """The node's DCGM exporter: given, annotated on the node, its DaemonSet pod, or IP."""
        s = self.s
        if input.dcgm_url:
            return input.dcgm_url
        node = self.cluster._read_node(input.node)
        notes = node.metadata.annotations or {}
        if notes.get(s.dcgm_address_annotation):
            return str(notes[s.dcgm_address_annotation])
        want = dict(part.split("=", 1) for part in s.dcgm_selector.split(",") if "=" in part)
        for p in pods:
            labels = p.metadata.labels or {}
            if not want or any(labels.get(k) != v for k, v in want.items()):
                continue
            ip = p.status.pod_ip if p.status else None
            for c in p.spec.containers or []:
                for port in c.ports or []:
                    if ip and port.name == s.dcgm_port_name:
                        return f"http://{ip}:{port.container_port}/metrics"
        for a in (node.status.addresses if node.status else None) or []:
            if a.type == "InternalIP":
                return f"http://{a.address}:{s.dcgm_port}/metrics"
        return None

    @activity.defn
    def triage_node(self, input: TriageInput) -> TriageResult:
        """Refuse while the node serves; classify its faults; cordon and label it."""
        on_node = self._pods_on_node(input.node)
        serving = self._serving(on_node, input.serving_namespaces)
        if serving:
            raise RefusedError(
                f"refusing to triage node {input.node}: still in the serving path "
                f"({', '.join(serving)} ready with {self.s.router_label}="
                f"{self.s.router_label_value}); deroute first"
            )
        faults: list[Fault] = []
        evidence: dict[str, float] = {}
        dcgm_error: str | None = None
        url = self._dcgm_url(input, on_node)
        if url is None:
            dcgm_error = "no DCGM exporter address for the node"
        else:
            try:
                snapshot = scrape(self.http, url, timeout=self.s.http_timeout_s)
                faults, evidence = faults_from_dcgm(snapshot, input.known_xids)
            except ApplicationError as exc:
                # A dead node has no exporter; the alert's Xid still classifies it.
                dcgm_error = str(exc)
        if dcgm_error is not None:
            faults = [
                Fault(fault_class="xid", xid=x, detail="from the alert") for x in input.known_xids
            ]
        faults.extend(input.reported_faults)
        verdict, per_fault = classify_node(faults)
        cordon = self.cluster.cordon(
            input,
            input.op_id,
            input.node,
            f"triage: {verdict.disposition} ({verdict.reason})",
            mark_unqualified=True,
        )
        return TriageResult(
            node=input.node,
            faults=faults,
            disposition=verdict.disposition,
            runbook=verdict.runbook,
            reason=verdict.reason,
            per_fault=per_fault,
            evidence=evidence,
            dcgm_error=dcgm_error,
            cordoned=cordon.unschedulable,
            qualified_label=cordon.qualified_label or "",
            applied_now=cordon.applied_now,
        )
