"""The simulated cluster: one Store with every simulated controller wired to it.

Called from the fleet builder (scenarios, `python -m fleetsim serve`), from drills
and from tests. It is the Python face of fleetsim's Kubernetes; `server.KubeServer`
is the HTTP face of the same object.

The fleet builder's kubelet contract:

- `on_pod_scheduled(cb)`: cb(pod) once a pod is bound to a node (it has
  `spec.nodeName`, `status.podIP`, phase Running): start its replica process on
  `status.podIP`. `on_pod_terminating(cb)`: cb(pod) when it gets a
  deletionTimestamp (stop taking new requests). `on_pod_deleted(cb)`: cb(pod)
  once it is gone (stop the process). Callbacks run on the thread that made the
  change: keep them quick and hand real work to your own loop.
- `set_pod_ready(ns, name, ready)`: report the readiness probe. Ready then
  follows containers, readiness gates (LeaderWorkerSet groups) and the node.
- `container_died(ns, name, reason="OOMKilled")`: a container exited and was
  restarted (restartCount+1, not ready until the probe passes again).
- `set_node_ready(name, status)` / `heartbeat_node(name)`: node faults and the
  kubelet's heartbeat (silence past `node_monitor_grace` makes the node Unknown).
- `finish_termination(ns, name)`: the replica exited before its grace period.

Example::

    cluster = Cluster(clock=ScaledClock(60))
    cluster.add_namespace("serving")
    cluster.add_node("gpu-0", gpus=8, labels={"topology.kubernetes.io/zone": "a"})
    cluster.on_pod_scheduled(lambda pod: replicas.start(pod["status"]["podIP"]))
    cluster.store.create("deployments", deployment_manifest, namespace="serving")
    cluster.set_pod_ready("serving", "llm-abc12", True)
    server = KubeServer(cluster).start()     # kubernetes client / kubectl at server.url
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fleetsim.clock import Clock, ManualClock
from fleetsim.kube import pods
from fleetsim.kube.controllers.base import Context, Timers
from fleetsim.kube.controllers.deployments import DeploymentController
from fleetsim.kube.controllers.endpointslices import EndpointSliceController
from fleetsim.kube.controllers.garbage import GarbageCollector
from fleetsim.kube.controllers.leaderworkersets import LeaderWorkerSetController
from fleetsim.kube.controllers.nodes import NodeLifecycleController
from fleetsim.kube.controllers.replicasets import ReplicaSetController
from fleetsim.kube.controllers.scheduler import Scheduler, gpu_summary
from fleetsim.kube.controllers.termination import TerminationController
from fleetsim.kube.pods import IpAllocator
from fleetsim.kube.store import Event, Obj, Store

PodCallback = Callable[[Obj], None]


class Cluster:
    def __init__(
        self,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        seed: int = 0,
        node_monitor_grace: float = 40.0,
        ready_on_schedule: bool = False,
        first_pod_ip: str = "127.10.0.1",
    ) -> None:
        self.store = store or Store(clock=clock, seed=seed)
        self.clock = self.store.clock
        self.timers = Timers(self.clock)
        self.ips = IpAllocator(first_pod_ip)
        self.ctx = Context(self.store, self.timers, self.ips, ready_on_schedule)
        # Order matters only for readability of event streams: the collector and the
        # terminator first, so later controllers see a settled store.
        self.garbage = GarbageCollector(self.ctx)
        self.termination = TerminationController(self.ctx)
        self.nodes = NodeLifecycleController(self.ctx, node_monitor_grace=node_monitor_grace)
        self.scheduler = Scheduler(self.ctx)
        self.replicasets = ReplicaSetController(self.ctx)
        self.deployments = DeploymentController(self.ctx)
        self.endpointslices = EndpointSliceController(self.ctx)
        self.leaderworkersets = LeaderWorkerSetController(self.ctx)
        self.store.subscribe(self._release_ip, resource="pods")
        for namespace in ("default", "kube-system"):
            self.add_namespace(namespace)

    # ------------------------------------------------------------- lifecycle
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start keeping time (grace periods, node-monitor grace) on `loop`, or on the
        running loop. Controllers that only react to changes work before this."""
        if not self.timers.attached:
            self.timers.attach(loop or asyncio.get_running_loop())

    def stop(self) -> None:
        self.timers.detach()

    async def advance(self, seconds: float) -> None:
        """Step a ManualClock fleet: let timers set just now start, advance, let the woken
        callbacks run. Call it on the loop the cluster was started on."""
        clock = self.clock
        if not isinstance(clock, ManualClock):
            raise TypeError("Cluster.advance needs a ManualClock")
        for _ in range(3):
            await asyncio.sleep(0)
        await clock.advance(seconds)
        for _ in range(3):
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ hooks
    def on_pod_scheduled(self, callback: PodCallback) -> Callable[[], None]:
        def on_event(event: Event) -> None:
            old_node = pods.node_name(event.old) if event.old else ""
            if pods.node_name(event.object) and not old_node and event.type != "DELETED":
                callback(event.object)

        return self.store.subscribe(on_event, resource="pods")

    def on_pod_terminating(self, callback: PodCallback) -> Callable[[], None]:
        def on_event(event: Event) -> None:
            if (
                event.type == "MODIFIED"
                and event.old is not None
                and pods.is_terminating(event.object)
                and not pods.is_terminating(event.old)
            ):
                callback(event.object)

        return self.store.subscribe(on_event, resource="pods")

    def on_pod_deleted(self, callback: PodCallback) -> Callable[[], None]:
        def on_event(event: Event) -> None:
            if event.type == "DELETED":
                callback(event.object)

        return self.store.subscribe(on_event, resource="pods")

    # ---------------------------------------------------------------- kubelet
    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> Obj:
        return pods.update_readiness(self.store, namespace, name, containers_ready=ready)

    def container_died(
        self, namespace: str, name: str, *, reason: str = "OOMKilled", exit_code: int = 137
    ) -> Obj:
        now = self.store.timestamp()

        def edit(p: Obj) -> None:
            for status in (p.get("status") or {}).get("containerStatuses") or []:
                status["restartCount"] = int(status.get("restartCount", 0)) + 1
                status["lastState"] = {
                    "terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": now}
                }
                status["state"] = {"running": {"startedAt": now}}
            pods.set_containers_ready(p, False, now)
            node = self.store.try_get("nodes", pods.node_name(p)) if pods.node_name(p) else None
            pods.refresh_ready(p, node, now)

        return self.store.mutate("pods", name, edit, namespace=namespace)

    def finish_termination(self, namespace: str, name: str) -> Obj | None:
        return self.store.remove("pods", name, namespace=namespace)

    def set_node_ready(
        self, name: str, status: str | bool = True, *, reason: str | None = None
    ) -> Obj:
        """status: True/"True", False/"False" (kubelet reports NotReady) or "Unknown"."""
        text = (
            {True: "True", False: "False"}.get(status, status)
            if isinstance(status, bool)
            else status
        )
        now = self.store.timestamp()
        default = {
            "True": "KubeletReady",
            "False": "KubeletNotReady",
            "Unknown": "NodeStatusUnknown",
        }
        return self.store.mutate(
            "nodes",
            name,
            lambda n: pods.set_condition(
                n, "Ready", str(text), now, reason=reason or default.get(str(text))
            ),
        )

    def heartbeat_node(self, name: str) -> None:
        self.nodes.heartbeat(name)

    # --------------------------------------------------------------- builders
    def add_namespace(self, name: str) -> Obj:
        existing = self.store.try_get("namespaces", name)
        if existing is not None:
            return existing
        return self.store.create(
            "namespaces", {"metadata": {"name": name}, "status": {"phase": "Active"}}
        )

    def add_node(
        self,
        name: str,
        *,
        gpus: int,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, Any]] | None = None,
        address: str = "127.0.0.1",
        ready: bool = True,
        gpu_product: str = "NVIDIA-H100-80GB-HBM3",
    ) -> Obj:
        now = self.store.timestamp()
        capacity = {"cpu": "96", "memory": "1056Gi", "pods": "110", pods.GPU: str(gpus)}
        node: Obj = {
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "nvidia.com/gpu.product": gpu_product,
                    "nvidia.com/gpu.count": str(gpus),
                    **(labels or {}),
                },
            },
            "spec": {"taints": list(taints)} if taints else {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "addresses": [
                    {"type": "InternalIP", "address": address},
                    {"type": "Hostname", "address": name},
                ],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "message": "kubelet is posting ready status" if ready else "",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                # Every field the API marks required: the official client refuses less.
                "nodeInfo": {
                    "machineID": name,
                    "systemUUID": name,
                    "bootID": name,
                    "kubeProxyVersion": "v1.32.0-fleetsim",
                    "kubeletVersion": "v1.32.0-fleetsim",
                    "osImage": "fleetsim",
                    "kernelVersion": "6.8.0",
                    "containerRuntimeVersion": "fleetsim://1",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                },
            },
        }
        return self.store.create("nodes", node)

    def gpu_summary(self) -> dict[str, dict[str, int]]:
        """Per node: allocatable, requested and free GPUs, as the scheduler sees them."""
        return gpu_summary(self.store)

    # -------------------------------------------------------------- internals
    def _release_ip(self, event: Event) -> None:
        if event.type == "DELETED":
            ip = (event.object.get("status") or {}).get("podIP")
            if ip:
                self.ips.release(ip)
        elif event.type == "ADDED":
            ip = (event.object.get("status") or {}).get("podIP")
            if ip:
                self.ips.reserve(ip)
