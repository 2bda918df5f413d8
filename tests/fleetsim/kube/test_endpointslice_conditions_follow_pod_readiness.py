"""EndpointSlice conditions track pod readiness, termination and publishNotReadyAddresses."""

from __future__ import annotations

from typing import Any

from fleetsim.kube.cluster import Cluster

from .conftest import NS, deployment, pod_names, service


def conditions(cluster: Cluster, svc: str = "llm") -> dict[str, dict[str, Any]]:
    (es,) = cluster.store.list(
        "endpointslices", namespace=NS, label_selector=f"kubernetes.io/service-name={svc}"
    )
    return {e["targetRef"]["name"]: e["conditions"] for e in es["endpoints"]}


def test_slice_lists_not_ready_pods_with_ready_false(cluster: Cluster) -> None:
    cluster.store.create("services", service(), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    a, b = pod_names(cluster)
    cluster.set_pod_ready(NS, a, True)
    assert conditions(cluster) == {
        a: {"ready": True, "serving": True, "terminating": False},
        b: {"ready": False, "serving": False, "terminating": False},
    }
    (es,) = cluster.store.list("endpointslices", namespace=NS)
    assert es["ports"] == [{"port": 8000, "protocol": "TCP", "name": "http"}]
    assert es["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == (
        "endpointslice-controller.k8s.io"
    )
    addresses = {e["targetRef"]["name"]: e["addresses"] for e in es["endpoints"]}
    pod_a = cluster.store.get("pods", a, namespace=NS)
    assert addresses[a] == [pod_a["status"]["podIP"]]


def test_terminating_ready_pod_is_serving_but_not_ready(cluster: Cluster) -> None:
    cluster.store.create("services", service(), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    (pod,) = pod_names(cluster)
    cluster.set_pod_ready(NS, pod, True)
    cluster.store.delete("pods", pod, namespace=NS)
    assert conditions(cluster)[pod] == {"ready": False, "serving": True, "terminating": True}
    cluster.set_pod_ready(NS, pod, False)
    assert conditions(cluster)[pod] == {"ready": False, "serving": False, "terminating": True}
    cluster.finish_termination(NS, pod)
    assert pod not in conditions(cluster)


def test_publish_not_ready_addresses_keeps_unready_pods_routable(cluster: Cluster) -> None:
    cluster.store.create("services", service("llm", publish_not_ready=True), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    (pod,) = pod_names(cluster)
    assert conditions(cluster)[pod] == {"ready": True, "serving": False, "terminating": False}
    cluster.store.delete("pods", pod, namespace=NS)
    assert conditions(cluster)[pod] == {"ready": True, "serving": False, "terminating": True}


def test_removing_the_router_label_takes_the_pod_out_of_the_slice(cluster: Cluster) -> None:
    cluster.store.create("services", service(), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    a, b = pod_names(cluster)
    cluster.store.patch("pods", a, {"metadata": {"labels": {"serving": None}}}, namespace=NS)
    assert set(conditions(cluster)) == {b}
    # serving= is router-only: the ReplicaSet still counts the pod, so nothing replaces it.
    assert pod_names(cluster) == [a, b]


def test_node_not_ready_turns_its_endpoints_not_ready(cluster: Cluster) -> None:
    cluster.store.create("services", service(), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    (pod,) = pod_names(cluster)
    cluster.set_pod_ready(NS, pod, True)
    node = cluster.store.get("pods", pod, namespace=NS)["spec"]["nodeName"]
    cluster.set_node_ready(node, False)
    assert conditions(cluster)[pod]["ready"] is False
    cluster.set_node_ready(node, True)
    assert conditions(cluster)[pod]["ready"] is True


def test_deleting_the_service_removes_its_slice(cluster: Cluster) -> None:
    cluster.store.create("services", service(), namespace=NS)
    assert len(cluster.store.list("endpointslices", namespace=NS)) == 1
    cluster.store.delete("services", "llm", namespace=NS)
    assert cluster.store.list("endpointslices", namespace=NS) == []
