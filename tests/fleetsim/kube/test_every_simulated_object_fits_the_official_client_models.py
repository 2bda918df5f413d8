"""Everything the simulated controllers write deserializes into the official client's models.

kubernetes 37's models are pydantic and reject an object missing a required field, so
a controller that writes a thinner object than a real cluster would break callers.
"""

from __future__ import annotations

from kubernetes import client

from fleetsim.kube.cluster import Cluster

from .conftest import NS, deployment, llm_template, pod_names, service


def test_objects_from_every_controller_load_as_typed_models(
    api: client.ApiClient, cluster: Cluster
) -> None:
    cluster.store.create("services", service(), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=2, gpus=8), namespace=NS)
    lws = {
        "metadata": {"name": "big"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": llm_template(8, {"app": "big"})},
        },
    }
    cluster.store.create("leaderworkersets", lws, namespace=NS)  # one group cannot fit
    for pod in pod_names(cluster):
        cluster.set_pod_ready(NS, pod, True)
    cluster.container_died(NS, pod_names(cluster, "app=llm")[0])
    cluster.set_node_ready("gpu-1", False)
    cluster.store.delete("pods", pod_names(cluster, "app=llm")[1], namespace=NS)

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    pods = core.list_namespaced_pod(NS).items
    assert {p.status.phase for p in pods} == {"Running", "Pending"}
    assert any(
        p.status.container_statuses and p.status.container_statuses[0].restart_count == 1
        for p in pods
    )
    assert any(p.metadata.deletion_timestamp for p in pods)
    nodes = core.list_node().items
    assert {n.metadata.name: n.spec.taints is not None for n in nodes}["gpu-1"]
    reasons = {e.reason for e in core.list_namespaced_event(NS).items}
    assert {"Scheduled", "FailedScheduling", "SuccessfulCreate", "ScalingReplicaSet"} <= reasons
    (es,) = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(NS).items
    assert es.endpoints and all(e.target_ref.kind == "Pod" for e in es.endpoints)
    assert apps.read_namespaced_deployment("llm", NS).status.observed_generation == 1
    assert apps.list_namespaced_replica_set(NS).items[0].status.replicas >= 1
    assert core.read_namespaced_service("llm", NS).spec.cluster_ip
    assert core.list_namespace().items
