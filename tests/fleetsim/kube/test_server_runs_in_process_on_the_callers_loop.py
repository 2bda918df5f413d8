"""The API server also runs inside the caller's asyncio loop, with optional token auth."""

from __future__ import annotations

import httpx

from fleetsim.clock import ManualClock
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.server import KubeServer

from .conftest import NS, deployment, pod_names


async def test_in_process_server_serves_and_keeps_fleet_time_on_the_same_loop() -> None:
    cluster = Cluster(clock=ManualClock())
    cluster.add_namespace(NS)
    cluster.add_node("gpu-0", gpus=8)
    async with (
        KubeServer(cluster, token="s3cret") as server,
        httpx.AsyncClient(base_url=server.url, headers={"authorization": "Bearer s3cret"}) as http,
    ):
        created = await http.post(
            f"/apis/apps/v1/namespaces/{NS}/deployments", json=deployment(replicas=1, gpus=8)
        )
        assert created.status_code == 201
        (pod,) = pod_names(cluster)
        deleted = await http.delete(
            f"/api/v1/namespaces/{NS}/pods/{pod}", params={"gracePeriodSeconds": "10"}
        )
        assert deleted.status_code == 202
        assert deleted.json()["metadata"]["deletionGracePeriodSeconds"] == 10
        await cluster.advance(10)
        missing = await http.get(f"/api/v1/namespaces/{NS}/pods/{pod}")
        assert missing.status_code == 404
        listed = await http.get(f"/api/v1/namespaces/{NS}/pods")
        assert [p["spec"]["nodeName"] for p in listed.json()["items"]] == ["gpu-0"]
        async with httpx.AsyncClient(base_url=server.url) as anonymous:
            denied = await anonymous.get(f"/api/v1/namespaces/{NS}/pods")
        assert denied.status_code == 401
        assert denied.json()["reason"] == "Unauthorized"
    assert not cluster.timers.attached  # the server started the timers, so it stopped them
