"""EndpointSlices: one slice per selector Service, its conditions following the pods.

Called from the store's event stream for Services, pods and nodes. For each
endpoint the conditions are computed exactly as the real EndpointSlice controller
does (pkg/controller/util/endpointslice `podToEndpoint`):

    serving     = pod Ready
    terminating = pod has a deletionTimestamp
    ready       = publishNotReadyAddresses or (serving and not terminating)

so a not-ready pod stays listed (with ready=false) and a Service with
`publishNotReadyAddresses: true` keeps routing to it: the runbook's reason to
read conditions, never addresses. Pods without an IP or node, and finished pods,
are left out; terminating pods stay in until they are gone.
"""

from __future__ import annotations

import hashlib
from typing import Any

from fleetsim.kube import pods
from fleetsim.kube.controllers.base import Context
from fleetsim.kube.controllers.workloads import owner_ref
from fleetsim.kube.errors import ApiError
from fleetsim.kube.selectors import from_map
from fleetsim.kube.store import Event, Obj

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"
ZONE_LABEL = "topology.kubernetes.io/zone"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def slice_name(service: Obj) -> str:
    digest = hashlib.sha256(service["metadata"]["uid"].encode()).digest()
    return f"{service['metadata']['name']}-" + "".join(
        _ALPHABET[b % len(_ALPHABET)] for b in digest[:5]
    )


def endpoint_for(pod: Obj, publish_not_ready: bool, zone: str | None) -> dict[str, Any]:
    serving = pods.is_ready(pod)
    terminating = pods.is_terminating(pod)
    ready = publish_not_ready or (serving and not terminating)
    endpoint: dict[str, Any] = {
        "addresses": [pod["status"]["podIP"]],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "nodeName": pods.node_name(pod),
        "targetRef": {
            "kind": "Pod",
            "namespace": pod["metadata"]["namespace"],
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        },
    }
    if zone:
        endpoint["zone"] = zone
    return endpoint


class EndpointSliceController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        ctx.store.subscribe(self._on_service, resource="services")
        ctx.store.subscribe(self._on_pod, resource="pods")

    def _on_service(self, event: Event) -> None:
        if event.type != "DELETED":
            self.sync(event.namespace or "default", event.name)

    def _on_pod(self, event: Event) -> None:
        namespace = event.namespace or "default"
        if event.type == "MODIFIED" and event.old is not None:
            old, new = event.old, event.object
            if (
                old["metadata"].get("labels") == new["metadata"].get("labels")
                and pods.is_ready(old) == pods.is_ready(new)
                and pods.is_terminating(old) == pods.is_terminating(new)
                and pods.is_terminal(old) == pods.is_terminal(new)
                and (old.get("status") or {}).get("podIP") == (new.get("status") or {}).get("podIP")
                and pods.node_name(old) == pods.node_name(new)
            ):
                return
        label_sets = [event.object["metadata"].get("labels")]
        if event.old is not None:
            label_sets.append(event.old["metadata"].get("labels"))
        for svc in self.ctx.store.list("services", namespace=namespace, copy=False):
            selector = (svc.get("spec") or {}).get("selector")
            if selector and any(from_map(selector).matches(labels) for labels in label_sets):
                self.sync(namespace, svc["metadata"]["name"])

    def sync(self, namespace: str, name: str) -> None:
        store = self.ctx.store
        svc = store.try_get("services", name, namespace=namespace, copy=False)
        if svc is None:
            return
        spec = svc.get("spec") or {}
        if not spec.get("selector"):
            return  # selectorless Services get their slices from someone else
        selector = from_map(spec["selector"])
        publish = bool(spec.get("publishNotReadyAddresses"))
        members = [
            p
            for p in store.list("pods", namespace=namespace, label_selector=selector, copy=False)
            if (p.get("status") or {}).get("podIP")
            and pods.node_name(p)
            and not pods.is_terminal(p)
        ]
        zones = {
            n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ZONE_LABEL)
            for n in store.list("nodes", copy=False)
        }
        members.sort(key=lambda p: p["metadata"]["name"])
        endpoints = [endpoint_for(p, publish, zones.get(pods.node_name(p))) for p in members]
        ports = [self._port(port, members) for port in spec.get("ports") or []]
        wanted = {
            "metadata": {
                "name": slice_name(svc),
                "namespace": namespace,
                "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
                "ownerReferences": [owner_ref(svc)],
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": ports,
        }
        try:
            current = store.try_get(
                "endpointslices", slice_name(svc), namespace=namespace, copy=False
            )
            if current is None:
                store.create("endpointslices", wanted, namespace=namespace)
            elif current.get("endpoints") != endpoints or current.get("ports") != ports:

                def edit(s: Obj) -> None:
                    s["endpoints"] = endpoints
                    s["ports"] = ports

                store.mutate(
                    "endpointslices", current["metadata"]["name"], edit, namespace=namespace
                )
        except ApiError:
            return

    def _port(self, port: dict[str, Any], members: list[Obj]) -> dict[str, Any]:
        target = port.get("targetPort", port.get("port"))
        if isinstance(target, str) and not target.isdigit():
            resolved = next(
                (
                    cp.get("containerPort")
                    for p in members
                    for c in p["spec"].get("containers") or []
                    for cp in c.get("ports") or []
                    if cp.get("name") == target
                ),
                None,
            )
            target = resolved if resolved is not None else port.get("port")
        out: dict[str, Any] = {"port": int(target or 0), "protocol": port.get("protocol", "TCP")}
        out["name"] = port.get("name", "")
        return out
