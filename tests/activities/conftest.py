"""Fixtures for the activity tests: fleetsim's Kubernetes over HTTP, the ledger, a fleet.

`kube` is a simulated cluster served by fleetsim's API server on a loopback port, with
the official client pointed at it through `activities.k8s.build_api_client`. Every
request the client makes is recorded, and at teardown each must be granted by
`deploy/rbac.yaml`, so an activity cannot start using a verb the manifest lacks.
`runner` is the ledger's EffectRunner on a fresh migrated PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, CordonResult, UncordonResult
from activities.common import MutatingInput, PodRef
from activities.config import ActivitySettings
from activities.effects import EffectRunner
from activities.k8s import build_api_client
from fleetsim.clock import ManualClock, ScaledClock
from fleetsim.fleet import Fleet
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.rbac import Authorizer, deploy_rbac_path, service_account_of
from fleetsim.kube.server import KubeServer
from fleetsim.scenario import parse_scenario
from ledger.store import Ledger

NS = "serving"
POOL = "llm"
MODEL = "llama-70b"
REV = "r7"
GPUS_PER_REPLICA = 4
RBAC_PATH = deploy_rbac_path()

GROUPS = {"api": ""}


def rbac_rules(path: Path = RBAC_PATH) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) granted by the ClusterRole(s) and Role(s) in the file."""
    granted: set[tuple[str, str, str]] = set()
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        for rule in doc.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        granted.add((group, resource, verb))
    return granted


def worker_user(path: Path = RBAC_PATH) -> str:
    """The Kubernetes user name of the ServiceAccount the RBAC file is written for."""
    return service_account_of(path)


_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


def request_permission(method: str, path: str, query: str = "") -> tuple[str, str, str]:
    """The RBAC (apiGroup, resource, verb) a request to the API server needs."""
    m = _PATH.match(path)
    if m is None:
        raise AssertionError(f"unrecognised API path {path}")
    group = "" if m.group("core") else str(m.group("group"))
    resource = m.group("resource")
    if m.group("sub"):
        resource = f"{resource}/{m.group('sub')}"
    named = m.group("name") is not None
    verb = {
        "GET": "get" if named else ("watch" if "watch=true" in query else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[method]
    return group, resource, verb


class RecordingApiClient(client.ApiClient):  # type: ignore[misc]
    """The official ApiClient, recording the permission every request needs."""

    def __init__(self, configuration: client.Configuration) -> None:
        client.ApiClient.__init__(self, configuration)
        self.used: set[tuple[str, str, str]] = set()

    def request(self, method: str, url: str, query_params: Any = None, *a: Any, **kw: Any) -> Any:
        path = url.split("://", 1)[-1]
        path = "/" + path.split("/", 1)[1] if "/" in path else "/"
        path, _, query = path.partition("?")
        if query_params:
            query = "&".join(f"{k}={str(v).lower()}" for k, v in query_params)
        self.used.add(request_permission(method, path, query))
        return super().request(method, url, query_params, *a, **kw)  # type: ignore[misc]


@dataclass
class Kube:
    cluster: Cluster
    server: KubeServer
    api: RecordingApiClient

    @property
    def store(self) -> Any:
        return self.cluster.store


@pytest.fixture
def kube() -> Iterator[Kube]:
    cluster = Cluster(clock=ManualClock(), ready_on_schedule=True)
    cluster.add_namespace(NS)
    server = KubeServer(cluster).start()
    plain = build_api_client(host=server.url)
    api = RecordingApiClient(plain.configuration)
    try:
        yield Kube(cluster, server, api)
    finally:
        api.close()
        plain.close()
        server.stop()
    missing = api.used - rbac_rules()
    assert not missing, f"deploy/rbac.yaml does not grant what the activities used: {missing}"


@pytest.fixture
def runner(database_url: str) -> Iterator[EffectRunner]:
    ledger = Ledger.connect(database_url)
    try:
        yield EffectRunner(ledger)
    finally:
        ledger.close()


@pytest.fixture
def settings() -> ActivitySettings:
    return ActivitySettings(poll_interval_s=0.05, kubernetes_timeout_s=5.0)


@pytest.fixture
def env() -> ActivityEnvironment:
    return ActivityEnvironment()


# ---------------------------------------------------------------------------- the fleet


def add_nodes(
    cluster: Cluster,
    names: list[str],
    *,
    gpus: int = 8,
    rack: str,
    zone: str,
    labels: dict[str, str] | None = None,
) -> None:
    for name in names:
        cluster.add_node(
            name,
            gpus=gpus,
            labels={
                "topology.kubernetes.io/zone": zone,
                "topology.fleetmend.io/rack": rack,
                "fleetmend.io/fabric-domain": f"fabric-{rack}",
                "fleetmend.io/node-pool": "h100",
                **(labels or {}),
            },
        )


def pod_template(
    labels: dict[str, str], gpus: int = GPUS_PER_REPLICA, **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.10.1",
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
            **spec,
        },
    }


def serving_labels(pool: str = POOL, model: str = MODEL, rev: str = REV) -> dict[str, str]:
    return {
        "app": pool,
        "pool": "serving",
        "serving": "true",
        "model": model,
        "model-revision": rev,
    }


def warm_labels(pool: str = POOL, model: str = MODEL, rev: str = REV) -> dict[str, str]:
    return {"app": pool, "pool": "warm", "model": model, "model-revision": rev}


def add_deployment(
    cluster: Cluster,
    name: str,
    replicas: int,
    labels: dict[str, str],
    selector: dict[str, str],
    gpus: int = GPUS_PER_REPLICA,
    **spec: Any,
) -> None:
    cluster.store.create(
        "deployments",
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "template": pod_template(labels, gpus, **spec),
            },
        },
        namespace=NS,
    )


def add_service(
    cluster: Cluster, name: str, selector: dict[str, str], *, publish_not_ready: bool = False
) -> None:
    spec: dict[str, Any] = {
        "selector": selector,
        "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
    }
    if publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    cluster.store.create("services", {"metadata": {"name": name}, "spec": spec}, namespace=NS)


def build_pool(
    cluster: Cluster,
    *,
    replicas: int = 8,
    warm: int = 2,
    racks: tuple[str, ...] = ("rack-a", "rack-b"),
    nodes_per_rack: int = 4,
) -> None:
    """`replicas` serving pods of POOL (4 GPUs each), `warm` spares, a Service on serving=true."""
    for r, rack in enumerate(racks):
        add_nodes(
            cluster,
            [f"{rack}-n{i}" for i in range(nodes_per_rack)],
            rack=rack,
            zone=f"zone-{r}",
        )
    add_deployment(cluster, POOL, replicas, serving_labels(), {"app": POOL, "pool": "serving"})
    if warm:
        add_deployment(cluster, f"{POOL}-warm", warm, warm_labels(), {"app": POOL, "pool": "warm"})
    add_service(cluster, POOL, {"app": POOL, "serving": "true"})


def pods(cluster: Cluster, selector: str) -> list[dict[str, Any]]:
    return sorted(
        cluster.store.list("pods", namespace=NS, label_selector=selector),
        key=lambda p: p["metadata"]["name"],
    )


def serving_pods(cluster: Cluster, pool: str = POOL) -> list[dict[str, Any]]:
    return pods(cluster, f"app={pool},pool=serving")


# ---------------------------------------------------------------------------- a whole fleet


class FleetHandle:
    """A fleetsim Fleet running on its own event loop thread, reached over HTTP.

    The activities are synchronous and block, so the fleet (replicas, router, traffic,
    API server) runs on another thread, as it would in another process.
    """

    def __init__(self, scenario: dict[str, Any], speed: float, *, rbac: bool = False) -> None:
        """`rbac`: the API server enforces deploy/rbac.yaml, and `api` is the worker's identity."""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        token = secrets.token_urlsafe(16) if rbac else None
        authorizer = Authorizer.from_file(RBAC_PATH, {token: worker_user()}) if token else None
        self.authorizer = authorizer

        async def make() -> Fleet:
            fleet = Fleet(
                parse_scenario(scenario),
                clock=ScaledClock(speed),
                kube_token=token,
                kube_authorizer=authorizer,
            )
            await fleet.start()
            return fleet

        self.fleet = self.run(make())
        self._plain = build_api_client(host=self.fleet.kube_url, token=token)
        self.api = RecordingApiClient(self._plain.configuration)
        self.http = httpx.Client(timeout=10.0)

    @property
    def store(self) -> Any:
        return self.fleet.store

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Any, *args: Any) -> Any:
        async def on_loop() -> Any:
            return fn(*args)

        return self.run(on_loop())

    def ref(self, pod: dict[str, Any]) -> PodRef:
        port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        return PodRef(
            namespace=pod["metadata"]["namespace"],
            name=pod["metadata"]["name"],
            node=pod["spec"].get("nodeName"),
            ip=pod["status"]["podIP"],
            metrics_url=f"http://{pod['status']['podIP']}:{port}",
            labels=pod["metadata"].get("labels") or {},
        )

    def pods(self, selector: str, namespace: str = NS) -> list[dict[str, Any]]:
        found = self.fleet.store.list("pods", namespace=namespace, label_selector=selector)
        return sorted(found, key=lambda p: p["metadata"]["name"])

    def close(self) -> None:
        try:
            self.run(self.fleet.stop())
        finally:
            self.http.close()
            self.api.close()
            self._plain.close()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


def scenario(
    *,
    replicas: int = 4,
    warm: int = 1,
    rate: float = 6.0,
    warm_rate: float = 4.0,
    version: str = "0.10.1",
    core: str = "V1",
    nodes: int = 6,
    **pool: Any,
) -> dict[str, Any]:
    return {
        "name": "activities",
        "rates": {
            "warm_rate": warm_rate,
            "cold_frac": 0.25,
            "warmup_s": 120,
            "load_s": 5,
            "tokens": 8,
            "token_interval_s": 0.05,
        },
        "nodes": [{"name": "gpu", "count": nodes, "gpus": 2, "zone": "zone-a", "rack": "rack-1"}],
        "namespaces": [
            {
                "name": NS,
                "pools": [
                    {
                        "name": POOL,
                        "model": MODEL,
                        "revision": REV,
                        "engine": {"version": version, "core": core},
                        "replicas": replicas,
                        "gpus_per_replica": 2,
                        "warm_spares": warm,
                        **pool,
                    }
                ],
            }
        ],
        "traffic": [{"namespace": NS, "pool": POOL, "rate": rate, "stream_fraction": 0.8}]
        if rate
        else [],
    }


@pytest.fixture
def fleet_factory() -> Iterator[Callable[..., FleetHandle]]:
    handles: list[FleetHandle] = []

    def start(spec: dict[str, Any], speed: float = 10.0) -> FleetHandle:
        handle = FleetHandle(spec, speed)
        handles.append(handle)
        return handle

    yield start
    used: set[tuple[str, str, str]] = set()
    for handle in handles:
        used |= handle.api.used
        handle.close()
    missing = used - rbac_rules()
    assert not missing, f"deploy/rbac.yaml does not grant what the activities used: {missing}"


def cordon(acts: ClusterActivities, node: str, op_id: str, reason: str = "") -> CordonResult:
    """Cordon as triage does (it is part of `triage_node`, not an activity of its own)."""
    return ActivityEnvironment().run(
        acts.cordon, MutatingInput(op_id=op_id, incident_id="i"), op_id, node, reason, True
    )


def uncordon(acts: ClusterActivities, node: str, op_id: str) -> UncordonResult:
    """Uncordon as relocation's last step does, keeping the node labelled unqualified."""
    return ActivityEnvironment().run(
        acts.uncordon, MutatingInput(op_id=op_id, incident_id="i"), op_id, node
    )
