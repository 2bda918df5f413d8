"""Server-side Table output (meta.k8s.io/v1 Table), the form `kubectl get` asks for.

Called from the server when a GET's Accept header asks for `as=Table`. Columns and
cell values follow the real API server's printers (pkg/printers/internalversion),
so `kubectl get pods -o wide` shows READY/STATUS/IP/NODE, `kubectl get nodes`
shows `Ready,SchedulingDisabled` for a cordoned node and `NotReady` for a lost one
(the runbook greps for it), and AGE counts simulated time. Priority-1 columns
appear only with `-o wide`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fleetsim.kube import pods
from fleetsim.kube.resources import Resource
from fleetsim.kube.store import Obj

Column = tuple[str, str, int, str]  # name, type, priority, format
Row = list[Any]


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{(s % 3600) // 60}m" if (s % 3600) // 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        return f"{h // (24 * 365)}y{(h // 24) % 365}d"
    return f"{h // (24 * 365)}y"


def _age(obj: Obj, now: datetime, field: str | None = None) -> str:
    stamp = obj.get(field) if field else obj["metadata"].get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    then = datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=now.tzinfo)
    return human_duration((now - then).total_seconds())


def _none(value: Any) -> str:
    return str(value) if value not in (None, "", []) else "<none>"


def _selector_text(selector: dict[str, Any] | None) -> str:
    if not selector:
        return "<none>"
    labels = selector.get("matchLabels", selector)
    return ",".join(f"{k}={v}" for k, v in labels.items()) or "<none>"


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
    if pods.is_terminating(pod):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod(pod: Obj, now: datetime) -> Row:
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    gate_text = (
        f"{sum(1 for g in gates if pods.condition_true(pod, g.get('conditionType', '')))}/{len(gates)}"
        if gates
        else "<none>"
    )
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(containers)}",
        _pod_status(pod),
        restarts,
        _age(pod, now),
        _none(status.get("podIP")),
        _none((pod.get("spec") or {}).get("nodeName")),
        _none(status.get("nominatedNodeName")),
        gate_text,
    ]


def _node(node: Obj, now: datetime) -> Row:
    ready = (pods.condition(node, "Ready") or {}).get("status")
    state = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    status = node.get("status") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        _age(node, now),
        info.get("kubeletVersion", ""),
        _none(addresses.get("InternalIP")),
        _none(addresses.get("ExternalIP")),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _service(svc: Obj, now: datetime) -> Row:
    spec = svc.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    return [
        svc["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP", "None"),
        "<none>",
        ports or "<none>",
        _age(svc, now),
        _selector_text(spec.get("selector")),
    ]


def _endpointslice(es: Obj, now: datetime) -> Row:
    ports = ",".join(str(p.get("port")) for p in es.get("ports") or []) or "<unset>"
    addresses = [a for e in es.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3])
    if len(addresses) > 3:
        shown += f" + {len(addresses) - 3} more..."
    return [
        es["metadata"]["name"],
        es.get("addressType", ""),
        ports,
        shown or "<unset>",
        _age(es, now),
    ]


def _containers(template: Obj) -> tuple[str, str]:
    containers = (template.get("spec") or {}).get("containers") or []
    return (
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
    )


def _deployment(dep: Obj, now: datetime) -> Row:
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    return [
        dep["metadata"]["name"],
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        _age(dep, now),
        names,
        images,
        _selector_text(spec.get("selector")),
    ]


def _replicaset(rs: Obj, now: datetime) -> Row:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    return [
        rs["metadata"]["name"],
        spec.get("replicas", 1),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        _age(rs, now),
        names,
        images,
        _selector_text(spec.get("selector")),
    ]


def _event(ev: Obj, now: datetime) -> Row:
    obj = ev.get("involvedObject") or {}
    return [
        _age(ev, now, "lastTimestamp"),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}",
        ev.get("message", ""),
    ]


def _namespace(ns: Obj, now: datetime) -> Row:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", "Active"), _age(ns, now)]


def _default(obj: Obj, now: datetime) -> Row:
    return [obj["metadata"]["name"], _age(obj, now)]


_NAME: Column = ("Name", "string", 0, "name")
_AGE: Column = ("Age", "string", 0, "")
PRINTERS: dict[str, tuple[list[Column], Callable[[Obj, datetime], Row]]] = {
    "Pod": (
        [
            _NAME,
            ("Ready", "string", 0, ""),
            ("Status", "string", 0, ""),
            ("Restarts", "string", 0, ""),
            _AGE,
            ("IP", "string", 1, ""),
            ("Node", "string", 1, ""),
            ("Nominated Node", "string", 1, ""),
            ("Readiness Gates", "string", 1, ""),
        ],
        _pod,
    ),
    "Node": (
        [
            _NAME,
            ("Status", "string", 0, ""),
            ("Roles", "string", 0, ""),
            _AGE,
            ("Version", "string", 0, ""),
            ("Internal-IP", "string", 1, ""),
            ("External-IP", "string", 1, ""),
            ("OS-Image", "string", 1, ""),
            ("Kernel-Version", "string", 1, ""),
            ("Container-Runtime", "string", 1, ""),
        ],
        _node,
    ),
    "Service": (
        [
            _NAME,
            ("Type", "string", 0, ""),
            ("Cluster-IP", "string", 0, ""),
            ("External-IP", "string", 0, ""),
            ("Port(s)", "string", 0, ""),
            _AGE,
            ("Selector", "string", 1, ""),
        ],
        _service,
    ),
    "EndpointSlice": (
        [
            _NAME,
            ("AddressType", "string", 0, ""),
            ("Ports", "string", 0, ""),
            ("Endpoints", "string", 0, ""),
            _AGE,
        ],
        _endpointslice,
    ),
    "Deployment": (
        [
            _NAME,
            ("Ready", "string", 0, ""),
            ("Up-to-date", "integer", 0, ""),
            ("Available", "integer", 0, ""),
            _AGE,
            ("Containers", "string", 1, ""),
            ("Images", "string", 1, ""),
            ("Selector", "string", 1, ""),
        ],
        _deployment,
    ),
    "ReplicaSet": (
        [
            _NAME,
            ("Desired", "integer", 0, ""),
            ("Current", "integer", 0, ""),
            ("Ready", "integer", 0, ""),
            _AGE,
            ("Containers", "string", 1, ""),
            ("Images", "string", 1, ""),
            ("Selector", "string", 1, ""),
        ],
        _replicaset,
    ),
    "Event": (
        [
            ("Last Seen", "string", 0, ""),
            ("Type", "string", 0, ""),
            ("Reason", "string", 0, ""),
            ("Object", "string", 0, ""),
            ("Message", "string", 0, ""),
        ],
        _event,
    ),
    "Namespace": ([_NAME, ("Status", "string", 0, ""), _AGE], _namespace),
}


def table(
    res: Resource,
    objects: list[Obj],
    *,
    now: datetime,
    resource_version: str,
    include_object: str = "PartialObjectMetadata",
) -> dict[str, Any]:
    columns, printer = PRINTERS.get(res.kind, ([_NAME, _AGE], _default))
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, now)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {"name": name, "type": type_, "format": fmt, "description": name, "priority": prio}
            for name, type_, prio, fmt in columns
        ],
        "rows": rows,
    }
