"""fleetsim counts every mutating request by object and by op-id stamp, and can hold one.

Fault-injection tests count effects here, on the fleet's side, rather than in the ledger
under test; a hold pauses a worker's write so the worker can be killed mid-activity.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from kubernetes import client

from fleetsim.clock import ScaledClock
from fleetsim.control import control_app
from fleetsim.fleet import Fleet
from fleetsim.kube.mutations import OP_ANNOTATION, MutationLog, stamped_op_id
from fleetsim.kube.server import KubeServer
from tests.fleetsim.conftest import small

from .conftest import NS, llm_template

POD = {
    "metadata": {"name": "p0", "labels": {"app": "llm", "serving": "true"}},
    "spec": llm_template(1)["spec"],
}


def stamp(op_id: str) -> dict[str, object]:
    return {"metadata": {"annotations": {OP_ANNOTATION: op_id}}}


def test_the_stamp_is_read_from_merge_bodies_and_json_patches() -> None:
    assert stamped_op_id(stamp("inc/deroute/p0")) == "inc/deroute/p0"
    json_patch = [
        {"op": "replace", "path": "/metadata/labels/serving", "value": "false"},
        {"op": "add", "path": "/metadata/annotations/fleetmend.io~1op-id", "value": "inc/x"},
    ]
    assert stamped_op_id(json_patch) == "inc/x"
    assert stamped_op_id({"spec": {"replicas": 3}}) is None
    assert stamped_op_id(None) is None


def test_a_hold_needs_a_pattern_and_a_mutating_method() -> None:
    log = MutationLog()
    with pytest.raises(ValueError, match="op_id_contains"):
        log.hold("")
    with pytest.raises(ValueError, match="method"):
        log.hold("inc/", method="GET")


def test_every_accepted_write_is_counted_once_by_object_and_by_stamp(
    api: client.ApiClient, server: KubeServer
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(NS, POD)
    core.patch_namespaced_pod("p0", NS, stamp("inc/deroute/p0"))
    core.patch_namespaced_pod("p0", NS, stamp("inc/deroute/p0"))
    core.patch_namespaced_pod("p0", NS, stamp("inc/weights/p0"), dry_run="All")
    with pytest.raises(client.ApiException):
        core.patch_namespaced_pod("missing", NS, stamp("inc/deroute/missing"))

    summary = server.mutations.summary()
    assert summary["by_object"] == {f"pods/{NS}/p0": 3}
    assert summary["by_op_id"] == {"inc/deroute/p0": 2}
    assert summary["by_op_id_and_object"] == {f"inc/deroute/p0 pods/{NS}/p0": 2}
    assert summary["unstamped"] == [{"method": "POST", "object": f"pods/{NS}/p0"}]


def test_a_held_write_waits_for_its_release_and_then_takes_effect(
    api: client.ApiClient, server: KubeServer
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(NS, POD)
    hold = server.mutations.hold("/deroute/", method="PATCH")
    body = {
        "metadata": {"labels": {"serving": None}, "annotations": {OP_ANNOTATION: "i/deroute/p0"}}
    }
    writer = threading.Thread(target=core.patch_namespaced_pod, args=("p0", NS, body))
    writer.start()
    deadline = time.monotonic() + 10
    while hold.holding is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hold.holding is not None and hold.holding.op_id == "i/deroute/p0"
    assert "serving" in core.read_namespaced_pod("p0", NS).metadata.labels
    assert server.mutations.writes("i/deroute/p0") == 0

    server.mutations.release(hold.id)
    writer.join(timeout=10)
    assert not writer.is_alive()
    assert "serving" not in core.read_namespaced_pod("p0", NS).metadata.labels
    assert server.mutations.writes("i/deroute/p0") == 1
    # A hold catches one request: the next matching write goes straight through.
    core.patch_namespaced_pod("p0", NS, body)
    assert server.mutations.writes("i/deroute/p0") == 2


async def test_the_control_app_serves_the_counts_and_sets_and_releases_holds() -> None:
    async with Fleet(small(), clock=ScaledClock(10)) as fleet:
        transport = httpx.ASGITransport(app=control_app(fleet))
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as ctl:
            assert (await ctl.post("/mutations/holds", json={"method": "PATCH"})).status_code == 422
            bad = await ctl.post("/mutations/holds", json={"op_id_contains": "x", "method": "GET"})
            assert bad.status_code == 422 and bad.json()["errors"][0].startswith("method:")
            made = await ctl.post("/mutations/holds", json={"op_id_contains": "/deroute/"})
            assert made.status_code == 201
            hold_id = made.json()["id"]
            listed = (await ctl.get("/mutations/holds")).json()
            assert [h["id"] for h in listed] == [hold_id] and listed[0]["holding"] is None
            released = await ctl.delete(f"/mutations/holds/{hold_id}")
            assert released.status_code == 200 and released.json()["released"] is True
            assert (await ctl.delete("/mutations/holds/99")).status_code == 404
            counts = (await ctl.get("/mutations")).json()
            assert set(counts) >= {"total", "by_object", "by_op_id", "by_op_id_and_object"}
