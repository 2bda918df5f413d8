"""Deployments own a ReplicaSet per template, resize it, and roll up its status."""

from __future__ import annotations

from fleetsim.kube.cluster import Cluster

from .conftest import NS, deployment, pod_names


def test_deployment_creates_an_owned_replicaset_with_the_template_hash(cluster: Cluster) -> None:
    dep = cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    (rs,) = cluster.store.list("replicasets", namespace=NS)
    assert rs["metadata"]["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]
    phash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"llm-{phash}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "llm", "pod-template-hash": phash}
    assert len(pod_names(cluster, f"pod-template-hash={phash}")) == 2


def test_scaling_the_deployment_resizes_its_replicaset(cluster: Cluster) -> None:
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    cluster.store.patch("deployments", "llm", {"spec": {"replicas": 5}}, namespace=NS)
    (rs,) = cluster.store.list("replicasets", namespace=NS)
    assert rs["spec"]["replicas"] == 5
    assert len(pod_names(cluster)) == 5
    cluster.store.patch("deployments", "llm", {"spec": {"replicas": 0}}, namespace=NS)
    assert [
        p
        for p in cluster.store.list("pods", namespace=NS)
        if not p["metadata"].get("deletionTimestamp")
    ] == []


def test_status_reports_ready_replicas_and_availability(cluster: Cluster) -> None:
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    status = cluster.store.get("deployments", "llm", namespace=NS)["status"]
    assert status["replicas"] == 2 and "readyReplicas" not in status  # omitted when zero
    for pod in pod_names(cluster):
        cluster.set_pod_ready(NS, pod, True)
    status = cluster.store.get("deployments", "llm", namespace=NS)["status"]
    assert status["readyReplicas"] == 2
    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert available["status"] == "True"


def test_a_template_change_makes_a_new_replicaset_and_empties_the_old(cluster: Cluster) -> None:
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    (old,) = cluster.store.list("replicasets", namespace=NS)
    cluster.store.patch(
        "deployments",
        "llm",
        {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}},
        namespace=NS,
    )
    sets = {
        rs["metadata"]["name"]: rs["spec"]["replicas"]
        for rs in cluster.store.list("replicasets", namespace=NS)
    }
    assert sets.pop(old["metadata"]["name"]) == 0
    assert list(sets.values()) == [1]


def test_changing_the_selector_is_refused(cluster: Cluster) -> None:
    from fleetsim.kube.errors import Invalid

    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    try:
        cluster.store.patch(
            "deployments",
            "llm",
            {
                "spec": {
                    "selector": {"matchLabels": {"app": "llm", "x": "y"}},
                    "template": {"metadata": {"labels": {"x": "y"}}},
                }
            },
            namespace=NS,
        )
    except Invalid as exc:
        assert "field is immutable" in exc.message
    else:
        raise AssertionError("selector change was accepted")


def test_deleting_the_namespace_removes_everything_in_it(cluster: Cluster) -> None:
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    cluster.store.delete("namespaces", NS)
    for kind in ("deployments", "replicasets", "pods", "events"):
        assert cluster.store.list(kind, namespace=NS) == [], kind
    assert len(cluster.store.list("nodes")) == 3
