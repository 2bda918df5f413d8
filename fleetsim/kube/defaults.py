"""Defaulting on create: the fields a real API server fills in before storing an object.

Called from `Store.create`. Readers of fleetsim objects (fleetmend's activities,
kubectl) see what they would see from a cluster: a Service has a clusterIP and a
targetPort, a pod has its schedulerName, restartPolicy and a 30 s grace period, a
Deployment has replicas=1, a LeaderWorkerSet the RecreateGroupOnPodRestart policy.
"""

from __future__ import annotations

import ipaddress
import itertools
from typing import Any

from fleetsim.kube.resources import Resource

_cluster_ips = itertools.count(int(ipaddress.IPv4Address("10.96.0.10")))


def _pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for container in spec.get("containers") or []:
        if isinstance(container, dict):
            container.setdefault("imagePullPolicy", "IfNotPresent")
            # As the API server defaults it: a limit with no request requests the limit,
            # which is how `kubectl describe node` and the scheduler count GPUs.
            resources = container.get("resources")
            if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
                requests = resources.setdefault("requests", {})
                for name, value in resources["limits"].items():
                    requests.setdefault(name, value)
            for port in container.get("ports") or []:
                port.setdefault("protocol", "TCP")


def apply(res: Resource, obj: dict[str, Any]) -> None:
    """Fill defaults in place."""
    spec = obj.get("spec")
    if res.kind == "Pod":
        if isinstance(spec, dict):
            _pod_spec(spec)
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif res.kind == "Service" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if "clusterIP" not in spec:
            spec["clusterIP"] = str(ipaddress.IPv4Address(next(_cluster_ips)))
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                port.setdefault("targetPort", port.get("port"))
    elif res.kind in ("Deployment", "ReplicaSet") and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        if res.kind == "Deployment":
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault(
                "strategy",
                {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                },
            )
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            _pod_spec(template_spec)
    elif res.kind == "LeaderWorkerSet" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("startupPolicy", "LeaderCreated")
        lwt = spec.get("leaderWorkerTemplate")
        if isinstance(lwt, dict):
            lwt.setdefault("size", 1)
            lwt.setdefault("restartPolicy", "RecreateGroupOnPodRestart")
    elif res.kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
