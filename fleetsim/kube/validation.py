"""Object validation: the 422 Invalid answers a real API server gives for bad objects.

Called from the store on every create and update (so from HTTP and Python alike).
Covers what fleetmend's activities and the runbook can get wrong: names, label
syntax, a workload whose selector does not match its template or that changes an
immutable selector, negative replicas, pod spec changes a real server forbids.
"""

from __future__ import annotations

import re
from typing import Any

from fleetsim.kube.errors import invalid
from fleetsim.kube.resources import Resource
from fleetsim.kube.selectors import from_spec

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

# Pod spec fields a real server lets an update change (plus binding nodeName once).
_MUTABLE_POD_SPEC = {"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"}

Causes = list[tuple[str, str]]


def validate(res: Resource, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise Invalid (422) listing every bad field, or return."""
    causes: Causes = []
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    _check_name(res, name, causes)
    _check_labels(meta.get("labels"), "metadata.labels", causes)
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        causes.append(("metadata.annotations", "Invalid value: annotation values must be strings"))
    check = _CHECKS.get(res.kind)
    if check is not None:
        check(obj, old, causes)
    if causes:
        raise invalid(res.kind, name, causes, res.group)


def _check_name(res: Resource, name: str, causes: Causes) -> None:
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
        return
    if res.kind in ("Service", "Namespace"):
        pattern, limit, what = (
            (_DNS_1035, 63, "a DNS-1035 label")
            if res.kind == "Service"
            else (_DNS_LABEL, 63, "a lowercase RFC 1123 label")
        )
    else:
        pattern, limit, what = _DNS_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain"
    if len(name) > limit or not pattern.fullmatch(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": must be {what}'))


def _check_labels(labels: Any, field: str, causes: Causes) -> None:
    if labels is None:
        return
    if not isinstance(labels, dict):
        causes.append((field, "Invalid value: must be a map of strings"))
        return
    for key, value in labels.items():
        prefix, _, short = str(key).rpartition("/")
        if (
            not short
            or len(short) > 63
            or not _QUALIFIED_NAME.fullmatch(short)
            or (prefix and not _DNS_SUBDOMAIN.fullmatch(prefix))
        ):
            causes.append(
                (
                    field,
                    f'Invalid value: "{key}": name part must consist of '
                    "alphanumeric characters, '-', '_' or '.'",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            causes.append(
                (
                    f"{field}.{key}" if field else key,
                    f'Invalid value: "{value}": a valid label must be an empty string '
                    "or consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character",
                )
            )


def _check_pod_spec(spec: Any, field: str, causes: Causes) -> None:
    if not isinstance(spec, dict):
        causes.append((field, "Required value"))
        return
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append((f"{field}.containers", "Required value"))
        return
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            causes.append((f"{field}.containers[{i}].name", "Required value"))
        elif not c.get("image"):
            causes.append((f"{field}.containers[{i}].image", "Required value"))


def _pod(obj: dict[str, Any], old: dict[str, Any] | None, causes: Causes) -> None:
    spec = obj.get("spec")
    _check_pod_spec(spec, "spec", causes)
    if old is None or not isinstance(spec, dict):
        return
    old_spec = dict(old.get("spec") or {})
    new_spec = dict(spec)
    if not old_spec.get("nodeName"):
        old_spec.pop("nodeName", None)
        new_spec.pop("nodeName", None)
    for field in _MUTABLE_POD_SPEC:
        old_spec.pop(field, None)
        new_spec.pop(field, None)
    old_images = [c.get("image") for c in old_spec.pop("containers", [])]
    new_containers = new_spec.pop("containers", [])
    stripped_old = [
        {k: v for k, v in c.items() if k != "image"}
        for c in (old.get("spec") or {}).get("containers", [])
    ]
    stripped_new = [{k: v for k, v in c.items() if k != "image"} for c in new_containers]
    if (
        old_spec != new_spec
        or stripped_old != stripped_new
        or len(old_images) != len(new_containers)
    ):
        causes.append(
            (
                "spec",
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.activeDeadlineSeconds`, "
                "`spec.tolerations` (only additions to existing tolerations) or "
                "`spec.terminationGracePeriodSeconds`",
            )
        )


def _replicas(obj: dict[str, Any], field: str, causes: Causes) -> None:
    replicas = (obj.get("spec") or {}).get("replicas")
    if replicas is None:
        return
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        causes.append((field, f'Invalid value: "{replicas}": must be an integer'))
    elif replicas < 0:
        causes.append((field, f"Invalid value: {replicas}: must be greater than or equal to 0"))


def _workload(obj: dict[str, Any], old: dict[str, Any] | None, causes: Causes) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        causes.append(("spec", "Required value"))
        return
    _replicas(obj, "spec.replicas", causes)
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        causes.append(("spec.selector", "Required value"))
        return
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    _check_labels(labels, "spec.template.metadata.labels", causes)
    try:
        matches = from_spec(selector).matches(labels)
    except Exception:
        matches = False
    if not matches:
        causes.append(
            (
                "spec.template.metadata.labels",
                f"Invalid value: {labels}: `selector` does not match template `labels`",
            )
        )
    _check_pod_spec(template.get("spec"), "spec.template.spec", causes)
    if old is not None and (old.get("spec") or {}).get("selector") != selector:
        causes.append(("spec.selector", f"Invalid value: {selector}: field is immutable"))


def _service(obj: dict[str, Any], old: dict[str, Any] | None, causes: Causes) -> None:
    for i, port in enumerate((obj.get("spec") or {}).get("ports") or []):
        value = port.get("port") if isinstance(port, dict) else None
        if not isinstance(value, int) or not 0 < value < 65536:
            causes.append(
                (
                    f"spec.ports[{i}].port",
                    f"Invalid value: {value}: must be between 1 and 65535, inclusive",
                )
            )


def _lws(obj: dict[str, Any], old: dict[str, Any] | None, causes: Causes) -> None:
    _replicas(obj, "spec.replicas", causes)
    lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate")
    if not isinstance(lwt, dict):
        causes.append(("spec.leaderWorkerTemplate", "Required value"))
        return
    size = lwt.get("size", 1)
    if not isinstance(size, int) or size < 1:
        causes.append(("spec.leaderWorkerTemplate.size", f"Invalid value: {size}: must be >= 1"))
    _check_pod_spec(
        (lwt.get("workerTemplate") or {}).get("spec"),
        "spec.leaderWorkerTemplate.workerTemplate.spec",
        causes,
    )


def _endpointslice(obj: dict[str, Any], old: dict[str, Any] | None, causes: Causes) -> None:
    if obj.get("addressType") not in ("IPv4", "IPv6", "FQDN"):
        causes.append(("addressType", "Unsupported value: must be IPv4, IPv6 or FQDN"))


_CHECKS = {
    "Pod": _pod,
    "Deployment": _workload,
    "ReplicaSet": _workload,
    "Service": _service,
    "LeaderWorkerSet": _lws,
    "EndpointSlice": _endpointslice,
}
