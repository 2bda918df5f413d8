"""Watches over HTTP: pods and endpointslices stream ADDED/MODIFIED/DELETED in order."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client, watch

from fleetsim.kube.cluster import Cluster

from .conftest import NS, deployment, pod_names, service


def collect(func: Any, stop_when: Any, **kwargs: Any) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []
    w = watch.Watch()
    for event in w.stream(func, timeout_seconds=5, **kwargs):
        seen.append((event["type"], event["object"]))
        if stop_when(seen):
            w.stop()
    return seen


def test_pod_watch_without_a_version_starts_with_the_current_pods(
    api: client.ApiClient, cluster: Cluster
) -> None:
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    seen = collect(
        client.CoreV1Api(api).list_namespaced_pod,
        lambda s: len(s) == 2,
        namespace=NS,
        label_selector="app=llm",
    )
    assert [t for t, _ in seen] == ["ADDED", "ADDED"]
    assert sorted(o.metadata.name for _, o in seen) == pod_names(cluster)


def test_pod_watch_from_a_version_replays_then_streams_live_changes(
    api: client.ApiClient, cluster: Cluster
) -> None:
    core = client.CoreV1Api(api)
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    pod = pod_names(cluster)[0]
    start = core.list_namespaced_pod(NS).metadata.resource_version
    cluster.set_pod_ready(NS, pod, True)
    # Removed while the watch is already streaming, so this half arrives live.
    timer = threading.Timer(0.5, lambda: cluster.store.remove("pods", pod, namespace=NS))
    timer.start()
    try:
        seen = collect(
            core.list_namespaced_pod,
            lambda s: (
                any(t == "DELETED" for t, _ in s)
                and any(t == "ADDED" and o.metadata.name != pod for t, o in s)
            ),
            namespace=NS,
            label_selector="app=llm",
            resource_version=start,
        )
    finally:
        timer.join()
    mine = [t for t, o in seen if o.metadata.name == pod]
    assert mine[0] == "MODIFIED" and mine[-1] == "DELETED"
    ready = [o for t, o in seen if t == "MODIFIED" and o.metadata.name == pod]
    assert any(c.type == "Ready" and c.status == "True" for c in ready[-1].status.conditions)
    # The replacement the ReplicaSet created is in the same stream, after the deletion.
    kinds = [(t, o.metadata.name == pod) for t, o in seen]
    assert kinds.index(("ADDED", False)) > kinds.index(("DELETED", True))


def test_endpointslice_watch_follows_pod_readiness(api: client.ApiClient, cluster: Cluster) -> None:
    discovery = client.DiscoveryV1Api(api)
    cluster.store.create("services", service(), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    pod = cluster.store.list("pods", namespace=NS)[0]["metadata"]["name"]
    start = discovery.list_namespaced_endpoint_slice(NS).metadata.resource_version
    timer = threading.Timer(0.3, lambda: cluster.set_pod_ready(NS, pod, True))
    timer.start()
    try:
        seen = collect(
            discovery.list_namespaced_endpoint_slice,
            lambda s: any(t == "MODIFIED" for t, _ in s),
            namespace=NS,
            label_selector="kubernetes.io/service-name=llm",
            resource_version=start,
        )
    finally:
        timer.join()
    kind, es = seen[-1]
    assert kind == "MODIFIED"
    assert [e.conditions.ready for e in es.endpoints] == [True]


def test_a_pod_that_leaves_the_selection_is_reported_deleted(
    api: client.ApiClient, cluster: Cluster
) -> None:
    core = client.CoreV1Api(api)
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    pod = cluster.store.list("pods", namespace=NS)[0]["metadata"]["name"]
    start = core.list_namespaced_pod(NS).metadata.resource_version
    timer = threading.Timer(
        0.3,
        lambda: cluster.store.patch(
            "pods", pod, {"metadata": {"labels": {"serving": None}}}, namespace=NS
        ),
    )
    timer.start()
    try:
        seen = collect(
            core.list_namespaced_pod,
            lambda s: len(s) >= 1,
            namespace=NS,
            label_selector="serving=true",
            resource_version=start,
        )
    finally:
        timer.join()
    assert [(t, o.metadata.name) for t, o in seen] == [("DELETED", pod)]
