"""The fleet end to end: built from a scenario, reachable over the Kubernetes API and
over HTTP on pod IPs, and reacting to each fault the way the runbook describes."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from kubernetes import client as k8s

from fleetsim.clock import ManualClock, ScaledClock
from fleetsim.contract import ANNOTATION_ROUTER_WEIGHT, LABEL_LWS_WORKER_INDEX as LWS_WORKER_INDEX
from fleetsim.fleet import Fleet
from fleetsim.kube import pods as kpods
from tests.fleetsim.conftest import small, until

NS = "serving"


def api(fleet: Fleet) -> k8s.CoreV1Api:
    cfg = k8s.Configuration(host=fleet.kube_url)
    return k8s.CoreV1Api(k8s.ApiClient(cfg))


def serving_pods(fleet: Fleet, pool: str = "llm") -> list[dict]:
    return sorted(
        (
            p
            for p in fleet.store.list(
                "pods", namespace=NS, label_selector=f"app={pool},pool=serving"
            )
            if not kpods.is_terminating(p)
            and not kpods.is_terminal(p)
            and p["metadata"]["labels"].get(LWS_WORKER_INDEX, "0") == "0"
        ),
        key=lambda p: p["metadata"]["name"],
    )


def ready_endpoints(fleet: Fleet, service: str = "llm") -> set[str]:
    out = set()
    for sl in fleet.store.list(
        "endpointslices", namespace=NS, label_selector=f"kubernetes.io/service-name={service}"
    ):
        for ep in sl.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready"):
                out.add(ep["targetRef"]["name"])
    return out


async def test_fleet_comes_up_warm_and_is_reachable_like_a_cluster() -> None:
    async with Fleet(small(), clock=ScaledClock(20)) as fleet:
        core = api(fleet)
        pods = await asyncio.to_thread(core.list_namespaced_pod, NS, label_selector="app=llm")
        assert len(pods.items) == 3
        assert all(p.status.pod_ip.startswith("127.") for p in pods.items)
        assert len(ready_endpoints(fleet)) == 2  # the warm spare is not routed
        warm = [p for p in pods.items if p.metadata.labels["pool"] == "warm"]
        assert len(warm) == 1 and "serving" not in warm[0].metadata.labels

        pod = serving_pods(fleet)[0]
        ip = pod["status"]["podIP"]
        async with httpx.AsyncClient(timeout=5) as http:
            metrics = (await http.get(f"http://{ip}:{fleet.port}/metrics")).text
            assert 'vllm:num_requests_waiting{engine="0",model_name="org/model-7b"}' in metrics
            exporter = fleet.store.get(
                "pods", f"nvidia-dcgm-exporter-{pod['spec']['nodeName']}", namespace="gpu-operator"
            )
            dcgm = await http.get(f"http://{exporter['status']['podIP']}:{fleet.dcgm_port}/metrics")
            assert f'pod="{pod["metadata"]["name"]}"' in dcgm.text
        # Initial replicas were already warm before t=0.
        rt = fleet.kubelet.pods[(NS, pod["metadata"]["name"])]
        assert rt.engine is not None and rt.engine.service_rate() == 10.0


async def test_oom_kill_derouts_then_the_container_returns_cold() -> None:
    async with Fleet(small(), clock=ScaledClock(40)) as fleet:
        victim = serving_pods(fleet)[1]["metadata"]["name"]
        injected = fleet.inject(
            {"at": 0, "kind": "pod-oom-killed",
             "target": {"namespace": NS, "pool": "llm", "replica": 1}}
        )  # fmt: skip
        assert injected.pods == [f"{NS}/{victim}"]
        labels = injected.alerts[0].labels
        assert labels["alertname"] == "FleetmendPodOOMKilled" and labels["pod"] == victim
        assert labels["fault"] == "pod-oom-killed" and labels["pool"] == "llm"
        assert victim not in ready_endpoints(fleet)
        pod = fleet.store.get("pods", victim, namespace=NS)
        status = pod["status"]["containerStatuses"][0]
        assert status["restartCount"] == 1
        assert status["lastState"]["terminated"]["reason"] == "OOMKilled"
        # Back-off (10 s) plus weight load (20 s), then the probe passes: ready, but cold.
        await until(lambda: victim in ready_endpoints(fleet), timeout=10, what="pod back")
        engine = fleet.kubelet.pods[(NS, victim)].engine
        assert engine is not None and engine.service_rate() < 10.0 * 0.5
        assert engine.prefix_hit_rate() < 0.4


async def test_node_lost_goes_unknown_after_the_monitor_grace_and_requests_retry() -> None:
    scenario = small(traffic=[{"namespace": NS, "pool": "llm", "rate": 3, "stream_fraction": 1}])
    async with Fleet(scenario, clock=ScaledClock(20)) as fleet:
        await until(lambda: fleet.counters.served > 5, what="traffic flowing")
        victim = serving_pods(fleet)[0]
        node = victim["spec"]["nodeName"]
        injected = fleet.inject({"at": 0, "kind": "node-not-ready", "target": {"node": node}})
        alert = injected.alerts[0].labels
        assert alert["alertname"] == "FleetmendNodeNotReady" and alert["node"] == node
        assert alert["pod"] == victim["metadata"]["name"] and alert["rack"] == "rack-1"
        # Still listed ready until the node controller notices the silence (40 s).
        assert victim["metadata"]["name"] in ready_endpoints(fleet)
        await until(lambda: fleet.counters.retried > 0, what="a retry before first byte")
        await until(
            lambda: victim["metadata"]["name"] not in ready_endpoints(fleet),
            timeout=8, what="endpoint leaves after node Unknown",
        )  # fmt: skip
        cond = kpods.condition(fleet.store.get("nodes", node), "Ready")
        assert cond is not None and cond["status"] == "Unknown"
        assert fleet.counters.failed == 0


async def test_xid_under_a_healthy_pod_keeps_it_ready_and_shows_in_dcgm() -> None:
    scenario = small(pool={"readiness": "health"})
    async with Fleet(scenario, clock=ScaledClock(20)) as fleet:
        victim = serving_pods(fleet)[0]
        name = victim["metadata"]["name"]
        injected = fleet.inject(
            {"at": 0, "kind": "gpu-xid", "xid": 79,
             "target": {"namespace": NS, "pool": "llm", "replica": 0}}
        )  # fmt: skip
        labels = injected.alerts[0].labels
        assert labels["xid"] == "79" and labels["pod"] == name
        gpu = fleet.node_gpus[victim["spec"]["nodeName"]].gpus[int(labels["gpu"])]
        assert gpu.xid == 79 and gpu.pod == (NS, name)
        await fleet.clock.sleep(10)  # several probe periods
        assert name in ready_endpoints(fleet)
        ip = victim["status"]["podIP"]
        async with httpx.AsyncClient(timeout=0.5) as http:
            assert (await http.get(f"http://{ip}:{fleet.port}/health")).status_code == 200
            try:
                await http.post(f"http://{ip}:{fleet.port}/v1/chat/completions",
                                json={"messages": []})  # fmt: skip
                raise AssertionError("inference on a GPU-hung replica answered")
            except httpx.ReadTimeout:
                pass


async def test_fake_alive_fails_readiness_and_leaves_the_routing_set() -> None:
    async with Fleet(small(), clock=ScaledClock(20)) as fleet:
        name = serving_pods(fleet)[0]["metadata"]["name"]
        injected = fleet.inject(
            {"at": 0, "kind": "fake-alive", "target": {"namespace": NS, "pool": "llm"}}
        )
        assert injected.alerts[0].labels["alertname"] == "FleetmendReplicaNoTraffic"
        await until(lambda: name not in ready_endpoints(fleet), what="fake-alive derouted")
        assert (
            kpods.condition(fleet.store.get("pods", name, namespace=NS), "Ready")["status"]
            == "False"
        )


async def test_eviction_fails_the_pod_and_a_broken_registry_holds_its_replacement() -> None:
    async with Fleet(small(), clock=ScaledClock(20)) as fleet:
        fleet.inject({"at": 0, "kind": "image-pull-failure",
                      "target": {"namespace": NS, "pool": "llm"}})  # fmt: skip
        victim = serving_pods(fleet)[0]["metadata"]["name"]
        injected = fleet.inject(
            {"at": 0, "kind": "pod-evicted", "target": {"namespace": NS, "pool": "llm"}}
        )
        assert injected.alerts[0].labels["alertname"] == "FleetmendPodEvicted"
        evicted = fleet.store.get("pods", victim, namespace=NS)
        assert evicted["status"]["phase"] == "Failed" and evicted["status"]["reason"] == "Evicted"

        def pulling() -> bool:
            for p in serving_pods(fleet):
                for cs in p["status"].get("containerStatuses") or []:
                    if (cs.get("state") or {}).get("waiting", {}).get(
                        "reason"
                    ) == "ImagePullBackOff":
                        return True
            return False

        await until(pulling, what="replacement in ImagePullBackOff")


async def test_fragmentation_leaves_the_replacement_pending_with_gpus_free() -> None:
    scenario = small(
        nodes=[
            {"name": "big", "count": 2, "gpus": 8, "occupied_gpus": 4, "rack": "rack-1"},
            {"name": "frag", "count": 2, "gpus": 8, "occupied_gpus": 6, "rack": "rack-2"},
        ],
        pool={"replicas": 2, "gpus_per_replica": 4, "warm_spares": 0},
    )
    async with Fleet(scenario, clock=ScaledClock(20)) as fleet:
        victim = serving_pods(fleet)[0]
        node = victim["spec"]["nodeName"]
        fleet.inject({"at": 0, "kind": "node-not-ready", "target": {"node": node}})
        await until(
            lambda: not kpods.node_ready(fleet.store.get("nodes", node)), what="node unknown"
        )
        # The controller replaces the pod once it is gone (force-delete it, as the
        # runbook's last resort does), and the replacement cannot be placed.
        fleet.store.delete("pods", victim["metadata"]["name"], namespace=NS, grace_period_seconds=0)

        def pending() -> dict | None:
            for p in serving_pods(fleet):
                cond = kpods.condition(p, "PodScheduled")
                if cond and cond["status"] == "False":
                    return cond
            return None

        cond = await until(pending, what="pending replacement")
        assert "Insufficient nvidia.com/gpu" in cond["message"]
        free = sum(
            g.free_indices().__len__() for n, g in fleet.node_gpus.items() if n.startswith("frag")
        )
        assert free == 4


async def test_rank_lost_takes_the_whole_group_out() -> None:
    scenario = small(
        nodes=[{"name": "gpu", "count": 6, "gpus": 2}],
        pool={"replicas": 2, "group_size": 2, "gpus_per_replica": 2, "warm_spares": 0},
    )
    async with Fleet(scenario, clock=ScaledClock(20)) as fleet:
        leaders = serving_pods(fleet)
        assert [p["metadata"]["name"] for p in leaders] == ["llm-0", "llm-1"]
        assert ready_endpoints(fleet) == {"llm-0", "llm-1"}
        injected = fleet.inject(
            {"at": 0, "kind": "rank-lost",
             "target": {"namespace": NS, "pool": "llm", "replica": 0, "rank": 1}}
        )  # fmt: skip
        labels = injected.alerts[0].labels
        assert labels["pod"] == "llm-0" and labels["group"] == "0" and labels["rank"] == "1"
        assert injected.pods == [f"{NS}/llm-0-1"]
        await until(lambda: "llm-0" not in ready_endpoints(fleet), what="group derouted")
        assert "llm-1" in ready_endpoints(fleet)


async def test_bad_rollout_crash_loops_the_new_revision() -> None:
    async with Fleet(small(nodes=[{"name": "gpu", "count": 6, "gpus": 2}]),
                     clock=ScaledClock(40)) as fleet:  # fmt: skip
        injected = fleet.inject(
            {"at": 0, "kind": "bad-rollout", "target": {"namespace": NS, "pool": "llm"}}
        )
        assert injected.alerts[0].labels["fault"] == "pod-crashloop"

        def crashlooping() -> bool:
            for p in serving_pods(fleet):
                if p["metadata"]["labels"]["model-revision"] != "r1-next":
                    continue
                for cs in p["status"].get("containerStatuses") or []:
                    if cs.get("restartCount", 0) >= 1:
                        return True
            return False

        await until(crashlooping, what="new revision crash-looping")


async def test_router_weights_from_annotations_steer_live_traffic() -> None:
    scenario = small(traffic=[{"namespace": NS, "pool": "llm", "rate": 4, "stream_fraction": 0.5}])
    async with Fleet(scenario, clock=ScaledClock(10)) as fleet:
        a, b = (p["metadata"]["name"] for p in serving_pods(fleet))
        fleet.store.patch("pods", a, {"metadata": {"annotations": {ANNOTATION_ROUTER_WEIGHT: "0"}}},
                          namespace=NS)  # fmt: skip
        before = fleet.counters.served_by_pod[a]
        await until(lambda: fleet.counters.served_by_pod[b] > 15, what="traffic on b")
        # Requests already in flight on a may finish; nothing new goes there.
        assert fleet.counters.served_by_pod[a] <= before + 2


async def test_the_fault_script_runs_at_its_times() -> None:
    scenario = small(faults=[
        {"at": 5, "kind": "pod-oom-killed", "target": {"namespace": NS, "pool": "llm", "replica": 0}},
        {"at": 10, "kind": "demand-surge", "factor": 3, "duration_s": 30,
         "target": {"namespace": NS, "pool": "llm"}},
    ], traffic=[{"namespace": NS, "pool": "llm", "rate": 1}])  # fmt: skip
    async with Fleet(scenario, clock=ScaledClock(20)) as fleet:
        script = fleet.start_script()
        await asyncio.wait_for(script, timeout=5)
        kinds = [(f.fault.kind, f.at) for f in fleet.injected]
        assert [k for k, _ in kinds] == ["pod-oom-killed", "demand-surge"]
        assert 5 <= kinds[0][1] < 7 and 10 <= kinds[1][1] < 12
        assert fleet.traffic[0].rate() == 3.0
        assert fleet.alerts()[0]["labels"]["alertname"] == "FleetmendPodOOMKilled"


async def test_a_manual_clock_steps_the_fleet_exactly() -> None:
    clock = ManualClock()
    async with Fleet(small(), clock=clock) as fleet:
        victim = serving_pods(fleet)[0]["metadata"]["name"]
        fleet.inject(
            {"at": 0, "kind": "pod-oom-killed", "target": {"namespace": NS, "pool": "llm"}}
        )
        assert fleet.now() == 0.0
        # Back-off 10 s, then a 20 s weight load: not before t=30.
        for _ in range(29):
            await clock.advance(1.0)
            await asyncio.sleep(0.01)
        assert victim not in ready_endpoints(fleet)
        for _ in range(10):
            await clock.advance(1.0)
            await asyncio.sleep(0.03)
            if victim in ready_endpoints(fleet):
                break
        assert victim in ready_endpoints(fleet)
        assert 30.0 <= fleet.now() <= 33.0
        engine = fleet.kubelet.pods[(NS, victim)].engine
        assert engine is not None and engine.age_s() <= 3.0
        assert engine.service_rate() == pytest.approx(2.5 + 7.5 * engine.age_s() / 60)
