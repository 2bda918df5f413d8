"""The whole simulated fleet, built from a scenario: what drills, the demo and tests run.

Used in-process by `fleetmend drill` / `fleetmend demo` and by tests, and by
`python -m fleetsim serve` to run it alone. `Fleet(scenario)` wires together:

* the Kubernetes side (`fleetsim.kube.cluster.Cluster` and its HTTP `KubeServer`, at
  `.kube_url`), populated with the scenario's namespaces, nodes, Services, serving and
  warm-spare Deployments (or LeaderWorkerSets for multi-node pools), filler pods for
  pre-occupied GPUs and one DCGM exporter pod per node;
* the kubelet, which runs a simulated vLLM replica on each serving pod's loopback IP;
* the router and one traffic generator per scenario `traffic` entry;
* the fault injector and the timed fault script.

All times are fleet seconds on the clock passed in (ScaledClock for tests, WallClock
for drills and the demo); `now()` is zero when `start()` returns.

    async with Fleet(load_scenario("replica-lost"), clock=ScaledClock(10)) as fleet:
        script = fleet.start_script()
        ...
        print(fleet.snapshot()["router"]["late"])
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetsim import contract as c
from fleetsim.actions import ActionSink
from fleetsim.clock import Clock, WallClock
from fleetsim.dcgm import DCGM_PORT, NodeGpus
from fleetsim.faults import Alert, InjectedFault, Injector
from fleetsim.kube import pods as kpods
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.rbac import Authorizer
from fleetsim.kube.server import KubeServer
from fleetsim.kubeconfig import write_kubeconfig
from fleetsim.kubelet import LABEL_ROLE, ROLE_EXPORTER, ROLE_FILLER, Kubelet
from fleetsim.netserve import AddressHost
from fleetsim.router import Counters, Router
from fleetsim.scenario import Fault, Pool, Scenario, load_scenario, parse_scenario
from fleetsim.traffic import TrafficGenerator

log = logging.getLogger(__name__)

SERVING_PORT = 8000
EXPORTER_NAMESPACE = "gpu-operator"
EXPORTER_APP = "nvidia-dcgm-exporter"
FILLER_NAMESPACE = "batch"


class Fleet:
    def __init__(
        self,
        scenario: Scenario | str | Path,
        *,
        clock: Clock | None = None,
        port: int | None = 0,
        dcgm_port: int | None = None,
        kube_port: int = 0,
        kube_token: str | None = None,
        kube_authorizer: Authorizer | None = None,
        traffic: bool = True,
        replay_after_first_byte: bool = False,
        dedupe_actions: bool = False,
        seed: int | None = None,
    ) -> None:
        """`port`: the replicas' serving port (0: pick a free one, as tests should;
        `serve` uses 8000). `dcgm_port` defaults to the same port in tests and 9400
        otherwise. `traffic=False` builds the fleet without the generators.
        `kube_authorizer`: the API server enforces RBAC for its tokens' users."""
        if isinstance(scenario, Scenario):
            self.scenario = scenario
        elif isinstance(scenario, dict):
            self.scenario = parse_scenario(scenario)
        else:
            self.scenario = load_scenario(scenario)
        self.clock: Clock = clock or WallClock()
        seed = self.scenario.seed if seed is None else seed
        self._random = random.Random(seed)
        # A random 127.N block per fleet, so concurrent fleets never share an address.
        self._block = random.SystemRandom().randint(20, 239)
        self.cluster = Cluster(clock=self.clock, seed=seed, first_pod_ip=f"127.{self._block}.0.2")
        self.store = self.cluster.store
        self.host = AddressHost()
        self.actions = ActionSink(dedupe=dedupe_actions)
        self.port = self._pick_port(port)
        self.dcgm_port = dcgm_port if dcgm_port is not None else (DCGM_PORT if port else self.port)
        self.node_gpus: dict[str, NodeGpus] = {}
        self.kubelet = Kubelet(
            self.cluster,
            self.clock,
            self.host,
            self.scenario,
            port=self.port,
            node_gpus=self.node_gpus,
            actions=self.actions,
        )
        self.router = Router(
            self.store, self.clock, replay_after_first_byte=replay_after_first_byte, seed=seed
        )
        self.traffic: list[TrafficGenerator] = (
            [
                TrafficGenerator(spec, self.router, self.clock, seed=seed + i)
                for i, spec in enumerate(self.scenario.traffic)
            ]
            if traffic
            else []
        )
        self.injector = Injector(self)
        self.injected: list[InjectedFault] = []
        self.kube_server = KubeServer(
            self.cluster, port=kube_port, token=kube_token, authorizer=kube_authorizer
        )
        self.kube_token = kube_token
        self._t0 = 0.0
        self._script: asyncio.Task[None] | None = None
        self._started = False

    # --- identity ----------------------------------------------------------------------

    @property
    def kube_url(self) -> str:
        return self.kube_server.url

    @property
    def counters(self) -> Counters:
        return self.router.counters

    def now(self) -> float:
        """Fleet seconds since `start()` returned."""
        return self.clock.now() - self._t0

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of fleet time (fast on a ScaledClock)."""
        await self.clock.sleep(seconds)

    async def run_until(self, t: float) -> None:
        """Wait until fleet time `t` (seconds since start)."""
        remaining = t - self.now()
        if remaining > 0:
            await self.clock.sleep(remaining)

    def write_kubeconfig(self, path: str | Path, *, namespace: str | None = None) -> Path:
        return write_kubeconfig(path, self.kube_url, token=self.kube_token, namespace=namespace)

    def _pick_port(self, port: int | None) -> int:
        if port:
            return port
        # One port for every replica: find one free on this fleet's first address.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((f"127.{self._block}.0.2", 0))
            return int(s.getsockname()[1])

    # --- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Fleet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, *, ready_timeout_s: float = 30.0) -> None:
        """Build the cluster, bring every replica up warm, then start traffic."""
        if self._started:
            return
        self._started = True
        self.cluster.start(asyncio.get_running_loop())
        await self.kube_server.serve_async()
        self.kubelet.start()
        self._build()
        await self._wait_ready(ready_timeout_s)
        self.kubelet.booting = False
        self._t0 = self.clock.now()
        for gen in self.traffic:
            gen.start()

    async def stop(self) -> None:
        if self._script is not None:
            self._script.cancel()
            await asyncio.gather(self._script, return_exceptions=True)
        for gen in self.traffic:
            await gen.stop()
        await self.kubelet.stop()
        await self.router.aclose()
        await self.host.close_all()
        with contextlib.suppress(Exception):
            await self.kube_server.aclose()
        self.cluster.stop()

    async def _wait_ready(self, timeout_s: float) -> None:
        want = self.expected_pods()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            ready = self._ready_serving_count()
            if ready >= len(want):
                return
            if loop.time() > deadline:
                raise TimeoutError(f"fleet not ready: {ready}/{len(want)} replica pods ready")
            await asyncio.sleep(0.02)

    def expected_pods(self) -> list[tuple[str, str]]:
        """(namespace, pool) once per replica pod the scenario asks for, spares included."""
        out = []
        for ns in self.scenario.namespaces:
            for pool in ns.pools:
                n = (pool.replicas + pool.warm_spares) * pool.group_size
                out += [(ns.name, pool.name)] * n
        return out

    def _ready_serving_count(self) -> int:
        # One list per namespace, not per pool: this runs every few milliseconds while a
        # fleet of hundreds of pools boots, and must not starve the probes it waits for.
        total = 0
        for ns in self.scenario.namespaces:
            pools = {pool.name for pool in ns.pools}
            for p in self.store.list("pods", namespace=ns.name):
                labels = p["metadata"].get("labels") or {}
                if labels.get(c.LABEL_APP) in pools and kpods.is_ready(p):
                    total += 1
        return total

    # --- building ----------------------------------------------------------------------

    def _build(self) -> None:
        s = self.scenario
        node_index = 0
        for group in s.nodes:
            for name in group.node_names():
                node_index += 1
                address = f"127.{self._block}.255.{node_index}"
                labels = {
                    c.LABEL_ZONE: group.zone,
                    c.LABEL_RACK: group.rack,
                    c.LABEL_GPU_PRODUCT: group.gpu_product,
                    **group.labels,
                }
                self.cluster.add_node(
                    name,
                    gpus=group.gpus,
                    labels=labels,
                    address=address,
                    gpu_product=group.gpu_product,
                )
                self.node_gpus[name] = NodeGpus.create(name, group.gpus, group.gpu_product)
                self._exporter_pod(name, address)
                if group.occupied_gpus:
                    self._filler_pod(name, group.occupied_gpus)
        for ns in s.namespaces:
            self.cluster.add_namespace(ns.name)
            for pool in ns.pools:
                self.store.create("services", self._service(pool), namespace=ns.name)
                for warm in (False, True):
                    count = pool.warm_spares if warm else pool.replicas
                    if warm and count == 0:
                        continue
                    if pool.group_size > 1:
                        self.store.create(
                            "leaderworkersets", self._lws(pool, warm, count), namespace=ns.name
                        )
                    else:
                        self.store.create(
                            "deployments", self._deployment(pool, warm, count), namespace=ns.name
                        )

    def _exporter_pod(self, node: str, address: str) -> None:
        self.cluster.add_namespace(EXPORTER_NAMESPACE)
        self.store.create(
            "pods",
            {
                "metadata": {
                    "name": f"{EXPORTER_APP}-{node}",
                    "labels": {"app": EXPORTER_APP, LABEL_ROLE: ROLE_EXPORTER},
                },
                "spec": {
                    "nodeName": node,
                    "hostNetwork": True,
                    "containers": [
                        {
                            "name": "dcgm-exporter",
                            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
                            "ports": [{"name": c.DCGM_PORT_NAME, "containerPort": self.dcgm_port}],
                        }
                    ],
                },
                "status": {
                    "phase": "Pending",
                    "podIP": address,
                    "podIPs": [{"ip": address}],
                    "hostIP": address,
                },
            },
            namespace=EXPORTER_NAMESPACE,
        )

    def _filler_pod(self, node: str, gpus: int) -> None:
        self.cluster.add_namespace(FILLER_NAMESPACE)
        self.store.create(
            "pods",
            {
                "metadata": {"name": f"batch-{node}", "labels": {LABEL_ROLE: ROLE_FILLER}},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.local/batch-train:1",
                            "resources": {
                                "requests": {c.RESOURCE_GPU: str(gpus)},
                                "limits": {c.RESOURCE_GPU: str(gpus)},
                            },
                        }
                    ],
                },
            },
            namespace=FILLER_NAMESPACE,
        )

    def _labels(self, pool: Pool, warm: bool) -> dict[str, str]:
        return {
            c.LABEL_APP: pool.name,
            c.LABEL_POOL: c.POOL_WARM if warm else c.POOL_SERVING,
            c.LABEL_MODEL: _label_value(pool.model),
            c.LABEL_MODEL_REVISION: pool.revision,
        }

    def _pod_template(self, pool: Pool, warm: bool, *, serving_label: bool) -> dict[str, Any]:
        labels = self._labels(pool, warm)
        if serving_label and not warm:
            labels[c.LABEL_SERVING] = c.SERVING_TRUE
        probe_period = max(1, round(self.scenario.probe_period_s))
        selector = (
            pool.warm_node_selector if warm and pool.warm_node_selector else pool.node_selector
        )
        spec: dict[str, Any] = {
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "vllm",
                    "image": f"vllm/vllm-openai:v{pool.engine.version}",
                    "args": ["--model", pool.model, "--port", str(self.port)],
                    "ports": [
                        {
                            "name": c.CONTAINER_PORT_NAME,
                            "containerPort": self.port,
                            "protocol": "TCP",
                        }
                    ],
                    "resources": {
                        "requests": {c.RESOURCE_GPU: str(pool.gpus_per_replica)},
                        "limits": {c.RESOURCE_GPU: str(pool.gpus_per_replica)},
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/health", "port": self.port},
                        "periodSeconds": probe_period,
                        "failureThreshold": self.scenario.probe_failure_threshold,
                    },
                    "livenessProbe": {
                        "httpGet": {"path": "/health", "port": self.port},
                        "periodSeconds": 10,
                        "failureThreshold": 3,
                    },
                }
            ],
        }
        if selector:
            spec["nodeSelector"] = dict(selector)
        return {
            "metadata": {
                "labels": labels,
                "annotations": {
                    c.ANNOTATION_ENGINE_VERSION: pool.engine.version,
                    c.ANNOTATION_ENGINE_CORE: pool.engine.core,
                    "fleetsim.io/model": pool.model,
                },
            },
            "spec": spec,
        }

    def _deployment(self, pool: Pool, warm: bool, replicas: int) -> dict[str, Any]:
        name = f"{pool.name}-warm" if warm else pool.name
        match = {c.LABEL_APP: pool.name, c.LABEL_POOL: c.POOL_WARM if warm else c.POOL_SERVING}
        return {
            "metadata": {"name": name, "labels": dict(match)},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": match},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {
                        "maxSurge": pool.max_surge,
                        "maxUnavailable": pool.max_unavailable,
                    },
                },
                "template": self._pod_template(pool, warm, serving_label=True),
            },
        }

    def _lws(self, pool: Pool, warm: bool, replicas: int) -> dict[str, Any]:
        name = f"{pool.name}-warm" if warm else pool.name
        return {
            "metadata": {
                "name": name,
                "labels": {
                    c.LABEL_APP: pool.name,
                    c.LABEL_POOL: c.POOL_WARM if warm else c.POOL_SERVING,
                },
            },
            "spec": {
                "replicas": replicas,
                "leaderWorkerTemplate": {
                    "size": pool.group_size,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": self._pod_template(pool, warm, serving_label=True),
                    "workerTemplate": self._pod_template(pool, warm, serving_label=False),
                },
            },
        }

    def _service(self, pool: Pool) -> dict[str, Any]:
        return {
            "metadata": {"name": pool.name, "labels": {c.LABEL_APP: pool.name}},
            "spec": {
                "selector": {c.LABEL_APP: pool.name, c.LABEL_SERVING: c.SERVING_TRUE},
                "ports": [
                    {
                        "name": c.CONTAINER_PORT_NAME,
                        "port": self.port,
                        "targetPort": self.port,
                        "protocol": "TCP",
                    }
                ],
                "publishNotReadyAddresses": pool.publish_not_ready_addresses,
                "type": "ClusterIP",
            },
        }

    # --- faults ------------------------------------------------------------------------

    def inject(self, fault: Fault | dict[str, Any]) -> InjectedFault:
        """Apply one fault now. Returns the resolved targets and the alerts it fires."""
        if isinstance(fault, dict):
            fault = Fault.model_validate(fault)
        result = self.injector.inject(fault)
        self.injected.append(result)
        log.info("fleetsim: injected %s at t=%.1fs: %s", fault.kind, result.at, result.pods)
        return result

    def start_script(self) -> asyncio.Task[None]:
        """Run the scenario's fault script in the background, at its `at` times."""
        if self._script is None:
            self._script = asyncio.create_task(self.run_script(), name="fleetsim fault script")
        return self._script

    async def run_script(self) -> None:
        for fault in self.scenario.fault_script():
            delay = fault.at - self.now()
            if delay > 0:
                await self.clock.sleep(delay)
            try:
                self.inject(fault)
            except Exception:
                # A fault that cannot land (its target already gone) must not stop the
                # rest of the script or the fleet.
                log.exception("fleetsim: fault %s at t=%s failed", fault.kind, fault.at)

    def firing(self, alert: Alert) -> list[Alert]:
        """`alert` as Alertmanager has it now: none while its rule does not fire yet.

        A node alert starts when the node stopped being Ready, which the node controller
        decides only after the node-monitor grace (the rule's `for` is not modelled). A
        pool's crash-loop alert is one alert per pod in CrashLoopBackOff.
        """
        if alert.per_crash_looping_pod:
            return self._crash_looping(alert)
        node_name = alert.awaits_node_not_ready
        if node_name is None:
            return [alert]
        node = self.store.try_get("nodes", node_name)
        if node is not None and kpods.node_ready(node):
            return []
        since = (kpods.condition(node, "Ready") or {}).get("lastTransitionTime") if node else None
        starts_at = (
            datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            if since
            else self.store.now()
        )
        return [replace(alert, starts_at=starts_at, awaits_node_not_ready=None)]

    def _crash_looping(self, alert: Alert) -> list[Alert]:
        namespace, pool = alert.labels.get("namespace"), alert.labels.get("pool", "")
        out = []
        for pod in self.store.list(
            "pods", namespace=namespace, label_selector=f"{c.LABEL_APP}={pool}"
        ):
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            waiting = [(s.get("state") or {}).get("waiting") or {} for s in statuses]
            if any(w.get("reason") == "CrashLoopBackOff" for w in waiting):
                labels = {
                    **alert.labels,
                    "pod": pod["metadata"]["name"],
                    "node": kpods.node_name(pod) or "",
                }
                out.append(replace(alert, labels=labels, per_crash_looping_pod=False))
        return out

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert the injected faults fired so far, in Alertmanager's POST shape."""
        return [
            fired.to_alertmanager()
            for f in self.injected
            for a in f.alerts
            for fired in self.firing(a)
        ]

    # --- observation -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "t": round(self.now(), 3),
            "router": self.counters.snapshot(),
            "actions": self.actions.snapshot(),
            "faults": [
                {"kind": f.fault.kind, "at": round(f.at, 3), "pods": f.pods, "nodes": f.nodes}
                for f in self.injected
            ],
        }


def _label_value(text: str) -> str:
    """A label-safe form of a model name ("org/model" is not a valid label value)."""
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "--" for ch in text)
    return cleaned.strip("-_.")[:63].rstrip("-_.")
