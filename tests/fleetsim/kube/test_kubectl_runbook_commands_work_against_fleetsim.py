"""The real kubectl binary runs the runbook's commands against fleetsim."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetsim.kube.cluster import Cluster
from fleetsim.kube.server import KubeServer
from fleetsim.kubeconfig import write_kubeconfig

from .conftest import NS, deployment, pod_names, service

KUBECTL = shutil.which("kubectl")


@pytest.fixture
def kubectl(server: KubeServer, cluster: Cluster, tmp_path: Path) -> Callable[..., str]:
    config = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    cluster.store.create("services", service(), namespace=NS)
    cluster.store.create("deployments", deployment(replicas=2), namespace=NS)
    cluster.set_pod_ready(NS, pod_names(cluster)[0], True)

    assert KUBECTL is not None, "kubectl must be on PATH (the image ships 1.32)"

    def run(*args: str) -> str:
        assert KUBECTL is not None
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(config), "--cache-dir", str(tmp_path / "cache"), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


def test_get_pods_wide_shows_ip_node_and_readiness(
    kubectl: Callable[..., str], cluster: Cluster
) -> None:
    out = kubectl("-n", NS, "get", "pods", "-l", "app=llm", "-o", "wide").splitlines()
    assert out[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    ready_pod, other = pod_names(cluster)
    pod = cluster.store.get("pods", ready_pod, namespace=NS)
    assert rows[ready_pod][1:3] == ["1/1", "Running"]
    assert rows[ready_pod][5:7] == [pod["status"]["podIP"], pod["spec"]["nodeName"]]
    assert rows[other][1] == "0/1"


def test_get_endpointslices_and_their_conditions(
    kubectl: Callable[..., str], cluster: Cluster
) -> None:
    table = kubectl("-n", NS, "get", "endpointslices").splitlines()
    assert table[0].split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert table[1].split()[1:3] == ["IPv4", "8000"]
    jsonpath = (
        '{range .items[*].endpoints[*]}{.addresses[0]}{"\\t"}{.conditions.ready}'
        '{"\\t"}{.conditions.serving}{"\\t"}{.conditions.terminating}{"\\n"}{end}'
    )
    lines = kubectl(
        "-n",
        NS,
        "get",
        "endpointslice",
        "-l",
        "kubernetes.io/service-name=llm",
        "-o",
        f"jsonpath={jsonpath}",
    ).split()
    assert sorted(lines[1::4]) == ["false", "true"]
    assert set(lines[3::4]) == {"false"}


def test_label_annotate_and_custom_columns(kubectl: Callable[..., str], cluster: Cluster) -> None:
    pod = pod_names(cluster)[0]
    kubectl("-n", NS, "label", "pod", pod, "serving-")
    assert "serving" not in cluster.store.get("pods", pod, namespace=NS)["metadata"]["labels"]
    ends = cluster.store.list("endpointslices", namespace=NS)[0]["endpoints"]
    assert pod not in {e["targetRef"]["name"] for e in ends}
    kubectl(
        "-n",
        NS,
        "annotate",
        "--overwrite",
        "service/llm",
        "router.example.com/pool-weight-warm=100",
    )
    svc = cluster.store.get("services", "llm", namespace=NS)
    assert svc["metadata"]["annotations"]["router.example.com/pool-weight-warm"] == "100"
    kubectl("-n", NS, "annotate", "deployment/llm", "gateway.example.com/shed-tier=2")
    kubectl("-n", NS, "annotate", "--overwrite", "deployment/llm", "gateway.example.com/shed-tier-")
    dep = cluster.store.get("deployments", "llm", namespace=NS)
    assert "gateway.example.com/shed-tier" not in (dep["metadata"].get("annotations") or {})
    kubectl("-n", NS, "label", "--overwrite", "pods", "-l", "app=llm", "serving=true")
    labelled = cluster.store.list("pods", namespace=NS, label_selector="app=llm,serving=true")
    assert len(labelled) == 2
    out = kubectl(
        "-n",
        NS,
        "get",
        "deploy,replicaset,leaderworkerset",
        "-o",
        "custom-columns=KIND:.kind,NAME:.metadata.name,SEL:.spec.selector.matchLabels",
    )
    kinds = [line.split()[0] for line in out.splitlines()[1:]]
    assert kinds == ["Deployment", "ReplicaSet"]
    assert "map[app:llm]" in out


def test_cordon_and_uncordon_a_node(kubectl: Callable[..., str], cluster: Cluster) -> None:
    kubectl("cordon", "gpu-2")
    assert cluster.store.get("nodes", "gpu-2")["spec"]["unschedulable"] is True
    nodes = {line.split()[0]: line.split()[1] for line in kubectl("get", "nodes").splitlines()[1:]}
    assert nodes["gpu-2"] == "Ready,SchedulingDisabled"
    cluster.set_node_ready("gpu-1", False)
    wide = kubectl("get", "nodes", "-o", "wide").splitlines()
    not_ready = [line.split()[0] for line in wide[1:] if " Ready" not in line]
    assert not_ready == ["gpu-1"]
    kubectl("uncordon", "gpu-2")
    assert not cluster.store.get("nodes", "gpu-2")["spec"].get("unschedulable")


def test_describe_pod_shows_conditions_and_scheduling_events(
    kubectl: Callable[..., str], cluster: Cluster
) -> None:
    big = {
        "metadata": {"name": "too-big"},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "16"}}}
            ]
        },
    }
    cluster.store.create("pods", big, namespace=NS)
    out = kubectl("-n", NS, "describe", "pod", "too-big")
    assert re.search(r"^Status:\s+Pending$", out, re.MULTILINE)
    events = out[out.index("Events:") :]
    assert "FailedScheduling" in events
    assert "Insufficient nvidia.com/gpu" in events


def test_force_delete_removes_the_pod_at_once(
    kubectl: Callable[..., str], cluster: Cluster
) -> None:
    pod = pod_names(cluster)[0]
    kubectl("-n", NS, "delete", "pod", pod, "--grace-period=0", "--force")
    assert pod not in pod_names(cluster)
    assert len(pod_names(cluster)) == 2  # the ReplicaSet replaced it


def test_deployment_ready_replicas_jsonpath(kubectl: Callable[..., str], cluster: Cluster) -> None:
    out = kubectl(
        "-n", NS, "get", "deploy/llm", "-o", "jsonpath={.status.readyReplicas}/{.status.replicas}"
    )
    assert out == "1/2"


def test_apply_creates_then_updates_with_default_validation(
    kubectl: Callable[..., str], cluster: Cluster, tmp_path: Path
) -> None:
    manifest = tmp_path / "web.yaml"
    body = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: serving}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: nginx}]}
"""
    manifest.write_text(body.replace("REPLICAS", "1"))
    assert "deployment.apps/web created" in kubectl("apply", "-f", str(manifest))
    manifest.write_text(body.replace("REPLICAS", "2"))
    assert "deployment.apps/web configured" in kubectl("apply", "-f", str(manifest))
    assert cluster.store.get("deployments", "web", namespace=NS)["spec"]["replicas"] == 2
    assert len(pod_names(cluster, "app=web")) == 2
