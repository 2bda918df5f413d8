"""Scenario files: the fleet's shape and a timed fault script, validated by pydantic.

Loaded by `python -m fleetsim serve`, by `Fleet` (which builds the Kubernetes objects
from it) and by `fleetmend drill`. The format is documented in
`fleetsim/scenarios/README.md`. Every model forbids unknown keys, so a typo is an error
that names the field (`pools.0.replcas: Extra inputs are not permitted`), never a
silently ignored setting. `load_scenario` raises `ScenarioError`, whose message lists
each bad field by its dotted path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fleetsim.kube.chaos import ApiFault

SCENARIO_DIR = Path(__file__).with_name("scenarios")

Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]

FaultKind = Literal[
    "node-not-ready",
    "pod-oom-killed",
    "pod-evicted",
    "rank-lost",
    "gpu-xid",
    "fake-alive",
    "demand-surge",
    "image-pull-failure",
    "node-disk-full",
    "bad-rollout",
    "kube-api",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rates(_Strict):
    """How fast a replica serves, and how long a new one takes to be ready and warm."""

    warm_rate: float = Field(20.0, gt=0, description="requests/s a warm replica sustains")
    cold_frac: float = Field(0.25, gt=0, le=1, description="fraction of warm_rate at ready")
    warmup_s: float = Field(120.0, ge=0, description="ready -> warm, linear")
    load_s: float = Field(30.0, ge=0, description="container start -> /health answers")
    tokens: int = Field(8, ge=1, description="tokens streamed per completion")
    token_interval_s: float = Field(0.05, ge=0, description="time per output token")


class Engine(_Strict):
    """vLLM release and engine core: decides which metric names `/metrics` exports."""

    version: str = Field("0.10.1", pattern=r"^\d+\.\d+(\.\d+)?$")
    core: Literal["V0", "V1"] = "V1"


class Pool(_Strict):
    """One served model: a Deployment (group_size 1) or a LeaderWorkerSet, and a Service."""

    name: Name
    model: str
    revision: str = "r1"
    engine: Engine = Engine()
    replicas: int = Field(ge=0)
    gpus_per_replica: int = Field(1, ge=1, description="GPUs per pod")
    group_size: int = Field(1, ge=1, description="pods per replica (>1: LeaderWorkerSet)")
    warm_spares: int = Field(0, ge=0, description="loaded replicas outside the serving set")
    rates: Rates | None = None
    readiness: Literal["health", "inference"] = "health"
    node_selector: dict[str, str] = Field(default_factory=dict)
    warm_node_selector: dict[str, str] = Field(default_factory=dict)
    max_surge: int = Field(1, ge=0)
    max_unavailable: int = Field(0, ge=0)
    publish_not_ready_addresses: bool = False


class Namespace(_Strict):
    name: Name
    pools: list[Pool] = Field(min_length=1)


class NodeGroup(_Strict):
    """`count` nodes named `{name}-{i}` (or one node `name` when count is 1 and exact)."""

    name: Name
    count: int = Field(1, ge=1)
    gpus: int = Field(8, ge=0)
    zone: str = "zone-a"
    rack: str = "rack-1"
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    # GPUs already taken by work outside the scenario's pools (fragmentation).
    occupied_gpus: int = Field(0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _occupied_fits(self) -> NodeGroup:
        if self.occupied_gpus > self.gpus:
            raise ValueError(f"occupied_gpus ({self.occupied_gpus}) exceeds gpus ({self.gpus})")
        return self

    def node_names(self) -> list[str]:
        if self.count == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.count)]


class Traffic(_Strict):
    """Open-loop arrivals at one pool's Service, through the router."""

    namespace: Name
    pool: Name
    rate: float = Field(gt=0, description="requests/s")
    stream_fraction: float = Field(1.0, ge=0, le=1)
    action_fraction: float = Field(0.0, ge=0, le=1, description="requests carrying an action")
    deadline_s: float = Field(30.0, gt=0, description="queue wait allowed before first byte")
    request_timeout_s: float = Field(120.0, gt=0)
    # "exact": arrivals on an absolute schedule, delayed but not dropped by a late sleep
    # (overdue by 2 s: dropped and counted). "paced": each gap slept in turn, so every
    # overrun is lost (about 15% of 60 req/s at 4x); the drills in CI at 20x are tuned
    # on it and hold their outcome only with that lighter load.
    arrivals: Literal["exact", "paced"] = "paced"


class Target(_Strict):
    """What a fault hits. Pods are picked among the pool's serving replicas by ordinal
    (sorted by name, so runs are repeatable); nodes by name or by rack."""

    namespace: Name | None = None
    pool: Name | None = None
    replica: int | None = Field(None, ge=0, description="ordinal among the pool's replicas")
    count: int = Field(1, ge=1, description="replicas hit (with rack: all in the rack)")
    node: str | None = None
    rack: str | None = None
    rank: int = Field(1, ge=0, description="rank-lost: worker index inside the group")


class Fault(_Strict):
    at: float = Field(ge=0, description="seconds of simulated time after start")
    kind: FaultKind
    target: Target = Target()
    xid: int = Field(79, ge=1, description="gpu-xid: the Xid code (79 off bus, 48 DBE ECC)")
    factor: float = Field(2.0, gt=0, description="demand-surge: arrival multiplier")
    duration_s: float | None = Field(None, gt=0, description="demand-surge: how long")
    api: ApiFault | None = Field(None, description="kube-api: the API server's sickness")

    @model_validator(mode="after")
    def _target_fits_kind(self) -> Fault:
        t = self.target
        if (self.kind == "kube-api") != (self.api is not None):
            raise ValueError("kube-api needs `api`, and only kube-api takes it")
        needs_pool = self.kind in (
            "pod-oom-killed",
            "pod-evicted",
            "rank-lost",
            "fake-alive",
            "demand-surge",
            "image-pull-failure",
            "bad-rollout",
        )
        if needs_pool and (t.namespace is None or t.pool is None):
            raise ValueError(f"{self.kind} needs target.namespace and target.pool")
        if self.kind in ("node-not-ready", "node-disk-full") and not (t.node or t.rack or t.pool):
            raise ValueError(f"{self.kind} needs target.node, target.rack or target.pool")
        if self.kind == "gpu-xid" and not (t.node or t.pool):
            raise ValueError("gpu-xid needs target.node or target.pool")
        return self


class Scenario(_Strict):
    name: Name
    description: str = ""
    seed: int = 1
    duration_s: float = Field(900.0, gt=0)
    rates: Rates = Rates()
    nodes: list[NodeGroup] = Field(min_length=1)
    namespaces: list[Namespace] = Field(min_length=1)
    traffic: list[Traffic] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    # Kubelet probe cadence (simulated seconds).
    probe_period_s: float = Field(5.0, gt=0)
    probe_failure_threshold: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _references_resolve(self) -> Scenario:
        pools = {(ns.name, p.name) for ns in self.namespaces for p in ns.pools}
        racks = {g.rack for g in self.nodes}
        nodes = {n for g in self.nodes for n in g.node_names()}
        if len(nodes) != sum(g.count for g in self.nodes):
            raise ValueError("nodes: node names collide")
        for i, tr in enumerate(self.traffic):
            if (tr.namespace, tr.pool) not in pools:
                raise ValueError(f"traffic.{i}: no pool {tr.namespace}/{tr.pool}")
        for i, f in enumerate(self.faults):
            t = f.target
            if t.pool is not None and (t.namespace, t.pool) not in pools:
                raise ValueError(f"faults.{i}.target: no pool {t.namespace}/{t.pool}")
            if t.node is not None and t.node not in nodes:
                raise ValueError(f"faults.{i}.target.node: no node {t.node!r}")
            if t.rack is not None and t.rack not in racks:
                raise ValueError(f"faults.{i}.target.rack: no rack {t.rack!r}")
        return self

    def pool(self, namespace: str, name: str) -> Pool:
        for ns in self.namespaces:
            if ns.name == namespace:
                for p in ns.pools:
                    if p.name == name:
                        return p
        raise KeyError(f"{namespace}/{name}")

    def pool_rates(self, pool: Pool) -> Rates:
        return pool.rates or self.rates

    def fault_script(self) -> list[Fault]:
        return sorted(self.faults, key=lambda f: f.at)


class ScenarioError(ValueError):
    """A scenario that does not validate; the message names every bad field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid scenario\n  " + "\n  ".join(problems))


def _describe(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        out.append(f"{where}: {e['msg']}")
    return out


def parse_scenario(data: Any, *, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(source, [f"(top level): expected a mapping, got {type(data).__name__}"])
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(source, _describe(err)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice is an error: YAML would keep the last
    silently, and the first value (often the intended one) would be lost unseen."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def safe_yaml(text: str) -> Any:
    """yaml.safe_load that refuses duplicate keys (raises yaml.YAMLError)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def load_scenario(ref: str | Path) -> Scenario:
    """Load a scenario by path, or by bundled name (`replica-lost`)."""
    path = Path(ref)
    if not path.exists():
        bundled = SCENARIO_DIR / f"{ref}.yaml"
        if not bundled.exists():
            known = ", ".join(bundled_scenarios())
            raise ScenarioError(str(ref), [f"no such file or bundled scenario (bundled: {known})"])
        path = bundled
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(str(path), [f"unreadable: {err}"]) from None
    try:
        data = safe_yaml(text)
    except yaml.YAMLError as err:
        raise ScenarioError(str(path), [f"YAML: {err}"]) from None
    return parse_scenario(data, source=str(path))


def bundled_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
