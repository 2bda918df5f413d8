"""Reconciliation's reads and writes: the ledger's intent, the cluster's stamps, findings.

Called from `workflows/reconcile.py` (ReconcileWorkflow) after every incident and on its
schedule. `read_ledger_operations` returns what the ledger says was proposed and applied;
`observe_effects` looks for each operation's stamp (`fleetmend.io/op-id`) on the objects
it targeted and on every pod of their namespaces, so an effect applied to two objects
shows twice; `store_findings` records what the workflow concluded, each finding once.
The models carry no SQL or Kubernetes types, so the workflow can import them.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import heartbeat

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from activities.config import ActivitySettings
    from ledger.store import Ledger

FindingKind = Literal["duplicate", "orphan", "drift"]


class LedgerQuery(BaseModel):
    incident_id: str | None = None
    since: datetime | None = None


class LedgerOperation(BaseModel):
    """One operation as the ledger recorded it (the intent)."""

    op_id: str
    incident_id: str
    kind: str
    target: str
    state: str
    intent: dict[str, Any] = Field(default_factory=dict)
    compensates: str | None = None
    emergency: bool = False
    dry_run: bool = False
    # What apply returned: names every object an operation that fans out touched.
    result: dict[str, Any] | None = None


class LedgerOperations(BaseModel):
    operations: list[LedgerOperation] = Field(default_factory=list)


class ObserveInput(BaseModel):
    operations: list[LedgerOperation]


class ObservedEffect(BaseModel):
    """What the cluster or gateway shows for one operation: how many times it is stamped there."""

    op_id: str
    present: bool
    # Objects carrying this op id's stamp; more than one is a duplicate effect.
    occurrences: int = 0
    detail: str = ""


class ObservedEffects(BaseModel):
    effects: list[ObservedEffect] = Field(default_factory=list)


class Finding(BaseModel):
    kind: FindingKind
    op_id: str
    target: str
    detail: str


class FindingsInput(BaseModel):
    incident_id: str | None
    findings: list[Finding]


class StoredFindings(BaseModel):
    run_id: int
    stored: int


READ_LEDGER_OPERATIONS = "read_ledger_operations"
OBSERVE_EFFECTS = "observe_effects"
STORE_FINDINGS = "store_findings"


def _names(value: Any) -> set[str]:
    """Every string key and value inside an intent or a result."""
    if isinstance(value, dict):
        return {str(k) for k in value} | {n for v in value.values() for n in _names(v)}
    if isinstance(value, list | tuple):
        return {n for v in value for n in _names(v)}
    return {value} if isinstance(value, str) else set()


def _meant_objects(op: LedgerOperation) -> set[str]:
    """The objects an operation names: its target, and the pods its intent or result lists."""
    namespace = op.target.split("/")[0] if op.target.count("/") == 2 else None
    meant = {op.target}
    if namespace is not None:
        meant |= {f"{namespace}/pod/{n}" for n in _names(op.intent) | _names(op.result)}
    return meant


class ReconcileActivities:
    """The ledger and the cluster, side by side, for ReconcileWorkflow."""

    # Imports stay inside the methods: the workflow imports this module for its models, and
    # its sandbox must not load the Kubernetes client or SQLAlchemy.
    def __init__(
        self, ledger: Ledger, k8s: ApiClient, settings: ActivitySettings | None = None
    ) -> None:
        from kubernetes.client import CoreV1Api

        from activities.config import ActivitySettings

        self.ledger = ledger
        self.core = CoreV1Api(k8s)
        self.s = settings or ActivitySettings()

    @activity.defn(name=READ_LEDGER_OPERATIONS)
    def read_ledger_operations(self, input: LedgerQuery) -> LedgerOperations:
        """The incident's operations as the ledger recorded them (or every one since `since`)."""
        from ledger.store import OperationRecord

        records: list[OperationRecord]
        if input.incident_id is not None:
            records = self.ledger.operations(input.incident_id)
        else:
            records = self.ledger.operations_since(input.since)
        return LedgerOperations(
            operations=[
                LedgerOperation(
                    op_id=r.op_id,
                    incident_id=r.incident_id or "",
                    kind=r.kind,
                    target=r.target,
                    state=r.state,
                    intent=r.intent,
                    compensates=r.compensates,
                    emergency=r.emergency,
                    dry_run=r.dry_run,
                    result=r.result,
                )
                for r in records
            ]
        )

    def _stamp(self, obj: Any) -> str | None:
        annotations = (obj.metadata.annotations if obj.metadata else None) or {}
        return annotations.get(self.s.op_annotation)

    def _target_stamp(self, target: str) -> tuple[str, str | None] | None:
        """(object, its stamp) for a `namespace/kind/name` or `kind/name` target."""
        from activities.errors import k8s_call

        parts = target.split("/")
        obj: Any
        try:
            if len(parts) == 3 and parts[1] == "service":
                obj = k8s_call(
                    "get",
                    f"service {parts[0]}/{parts[2]}",
                    lambda: self.core.read_namespaced_service(parts[2], parts[0]),
                )
            elif len(parts) == 2 and parts[0] == "node":
                obj = k8s_call("get", f"node {parts[1]}", lambda: self.core.read_node(parts[1]))
            else:
                return None
        except Exception:  # a target that is gone carries no stamp
            return None
        return target, self._stamp(obj)

    @activity.defn(name=OBSERVE_EFFECTS)
    def observe_effects(self, input: ObserveInput) -> ObservedEffects:
        """How many objects carry each operation's stamp right now."""
        from activities.errors import k8s_call

        holders: dict[str, list[str]] = {}
        namespaces = sorted(
            {op.target.split("/")[0] for op in input.operations if op.target.count("/") == 2}
        )
        for namespace in namespaces:
            heartbeat()
            pods: Any = k8s_call(
                "list",
                f"pods {namespace}",
                lambda ns=namespace: self.core.list_namespaced_pod(ns),  # type: ignore[misc]
            )
            for pod in pods.items or []:
                stamp = self._stamp(pod)
                if stamp:
                    name = pod.metadata.name if pod.metadata else "?"
                    holders.setdefault(stamp, []).append(f"{namespace}/pod/{name}")
        for target in sorted({op.target for op in input.operations}):
            heartbeat()
            found = self._target_stamp(target)
            if found is not None and found[1]:
                holders.setdefault(found[1], []).append(found[0])
        effects = []
        for op in input.operations:
            holding = holders.get(op.op_id, [])
            meant = _meant_objects(op)
            # One operation may touch several objects on purpose (a ramp step sets every
            # pod's weight); its stamp on an object it never named is the effect applied twice.
            stray = [h for h in holding if h not in meant]
            effects.append(
                ObservedEffect(
                    op_id=op.op_id,
                    present=bool(holding),
                    occurrences=len(stray) + (1 if len(stray) < len(holding) else 0),
                    detail=", ".join(holding),
                )
            )
        return ObservedEffects(effects=effects)

    @activity.defn(name=STORE_FINDINGS)
    def store_findings(self, input: FindingsInput) -> StoredFindings:
        """Record the workflow's findings in the ledger (each kind and op id once)."""
        from ledger.reconcile import store_findings

        run_id, stored = store_findings(
            self.ledger.engine,
            incident_id=input.incident_id,
            findings=[
                (f.kind, f.op_id, {"target": f.target, "detail": f.detail}) for f in input.findings
            ],
            reconciler="ReconcileWorkflow",
        )
        return StoredFindings(run_id=run_id, stored=stored)
