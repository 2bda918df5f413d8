"""Fixtures for fleetsim's Kubernetes: a cluster on a manual clock, served over HTTP.

`cluster` is a fresh simulated cluster (three GPU nodes, namespace `serving`);
`server` serves it on an ephemeral loopback port from a background thread; `api`
is the official client pointed at it; `advance(seconds)` moves the fleet clock on
the server's loop, so grace periods elapse exactly and without sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from fleetsim.clock import ManualClock
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.server import KubeServer

NS = "serving"


def llm_template(gpus: int = 4, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels or {"app": "llm", "serving": "true"}},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.9.0",
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


def deployment(name: str = "llm", replicas: int = 2, gpus: int = 4) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": llm_template(gpus, {"app": name, "serving": "true"}),
        },
    }


def service(
    name: str = "llm", *, selector: dict[str, str] | None = None, publish_not_ready: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": selector or {"app": name, "serving": "true"},
        "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
    }
    if publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    return {"metadata": {"name": name}, "spec": spec}


def make_cluster(gpus: tuple[int, ...] = (8, 8, 8)) -> Cluster:
    cluster = Cluster(clock=ManualClock())
    cluster.add_namespace(NS)
    for i, count in enumerate(gpus):
        cluster.add_node(
            f"gpu-{i}",
            gpus=count,
            labels={"topology.kubernetes.io/zone": f"zone-{i % 2}", "pool": "h100"},
        )
    return cluster


@pytest.fixture
def cluster() -> Cluster:
    return make_cluster()


@pytest.fixture
def server(cluster: Cluster) -> Iterator[KubeServer]:
    srv = KubeServer(cluster).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def api(server: KubeServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


@pytest.fixture
def advance(server: KubeServer, cluster: Cluster) -> Callable[[float], None]:
    clock = cluster.clock
    assert isinstance(clock, ManualClock)

    def step(seconds: float) -> None:
        # The cluster's timers sleep on the server's loop, so time moves there.
        asyncio.run_coroutine_threadsafe(cluster.advance(seconds), server.loop).result(timeout=5)

    return step


def pod_names(cluster: Cluster, selector: str | None = None) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in cluster.store.list("pods", namespace=NS, label_selector=selector)
    )
