"""ReplicaSets replace deleted pods and pods stripped of a selector label (which keep GPUs)."""

from __future__ import annotations

from fleetsim.kube.cluster import Cluster

from .conftest import NS, deployment, pod_names


def live(cluster: Cluster, selector: str = "app=llm") -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in cluster.store.list("pods", namespace=NS, label_selector=selector)
        if not p["metadata"].get("deletionTimestamp")
    )


def test_deleted_pod_is_replaced_while_it_is_still_terminating(cluster: Cluster) -> None:
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    a, b = pod_names(cluster)
    cluster.store.delete("pods", a, namespace=NS)
    assert len(live(cluster)) == 2 and a not in live(cluster) and b in live(cluster)
    assert cluster.store.get("pods", a, namespace=NS)["metadata"]["deletionTimestamp"]


def test_stripping_the_selector_label_orphans_the_pod_and_creates_a_replacement(
    cluster: Cluster,
) -> None:
    cluster.store.create("deployments", deployment(replicas=2, gpus=8), namespace=NS)
    a, _ = pod_names(cluster)
    before = cluster.gpu_summary()
    cluster.store.patch("pods", a, {"metadata": {"labels": {"app": None}}}, namespace=NS)
    old = cluster.store.get("pods", a, namespace=NS)
    assert "ownerReferences" not in old["metadata"]  # released by the ReplicaSet
    assert old["status"]["phase"] == "Running" and old["spec"]["nodeName"]
    assert len(live(cluster)) == 2 and a not in live(cluster)
    # The orphan still holds its 8 GPUs, so the replacement took a third node's.
    after = cluster.gpu_summary()
    assert (
        sum(n["requested"] for n in after.values())
        == sum(n["requested"] for n in before.values()) + 8
    )


def test_matching_orphan_is_adopted_and_surplus_is_deleted(cluster: Cluster) -> None:
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    (owned,) = pod_names(cluster)
    rs = cluster.store.list("replicasets", namespace=NS)[0]
    template = rs["spec"]["template"]
    cluster.store.create(
        "pods",
        {
            "metadata": {"name": "stray", "labels": template["metadata"]["labels"]},
            "spec": template["spec"],
        },
        namespace=NS,
    )
    survivors = live(cluster)
    assert len(survivors) == 1
    (kept,) = survivors
    pod = cluster.store.get("pods", kept, namespace=NS)
    assert pod["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
    assert {kept} <= {owned, "stray"}


def test_replicaset_status_counts_ready_pods(cluster: Cluster) -> None:
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    a, _ = pod_names(cluster)
    cluster.set_pod_ready(NS, a, True)
    (rs,) = cluster.store.list("replicasets", namespace=NS)
    assert rs["status"]["replicas"] == 2
    assert rs["status"]["readyReplicas"] == 1
