"""A sick Kubernetes API is a fault like the others: injected by a scenario's fault script
or through the control app, and read back (windows, mutation counts) from the control app."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleetsim.clock import ScaledClock
from fleetsim.control import control_app
from fleetsim.fleet import Fleet
from tests.fleetsim.conftest import small

SICK = {"answer": "error", "status": 503, "namespaces": ["serving"], "for_wall_s": 600}


def patch_service(fleet: Fleet) -> None:
    with client.ApiClient(client.Configuration(host=fleet.kube_url)) as api:
        body = {"metadata": {"annotations": {"fleetmend.io/op-id": "inc/protect/llm"}}}
        client.CoreV1Api(api).patch_namespaced_service("llm", "serving", body)


async def test_the_control_app_opens_reports_and_closes_an_api_fault_window() -> None:
    async with Fleet(small(), clock=ScaledClock(10), traffic=False) as fleet:
        transport = httpx.ASGITransport(app=control_app(fleet))
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as ctl:
            bad = await ctl.post("/faults", json={"kind": "kube-api", "api": {"answer": "x"}})
            assert bad.status_code == 422
            assert bad.json()["errors"][0].startswith("api.answer: Input should be")

            opened = await ctl.post("/faults", json={"kind": "kube-api", "api": SICK})
            assert opened.status_code == 200 and opened.json()["alerts"] == []
            with pytest.raises(ApiException) as refused:
                await asyncio.to_thread(patch_service, fleet)
            assert refused.value.status == 503

            report = (await ctl.get("/kube-api")).json()
            [window] = report["windows"]
            assert (window["answer"], window["status"], window["answered"]) == ("error", 503, 1)
            assert window["by_object"] == {"services serving/llm": 1}
            assert (report["mutations"], report["refused"], report["applied_twice"]) == (1, 1, {})

            closed = (await ctl.delete("/kube-api")).json()
            assert closed["windows"][0]["open"][0] <= closed["windows"][0]["open"][1]
            await asyncio.to_thread(patch_service, fleet)
            await asyncio.to_thread(patch_service, fleet)
            twice = (await ctl.get("/kube-api")).json()["applied_twice"]
            assert twice == {"patch services serving/llm op=inc/protect/llm": 2}


async def test_a_scenarios_fault_script_opens_the_window_at_its_time() -> None:
    scenario = small(faults=[{"at": 3, "kind": "kube-api", "api": SICK}])
    async with Fleet(scenario, clock=ScaledClock(20), traffic=False) as fleet:
        script = fleet.start_script()
        await fleet.run_until(1)
        assert fleet.kube_server.chaos.windows == []
        await asyncio.to_thread(patch_service, fleet)
        await script
        [window] = fleet.kube_server.chaos.windows
        assert window.fault.status == 503
        with pytest.raises(ApiException):
            await asyncio.to_thread(patch_service, fleet)
