"""Assess: size of the loss, failure domains, common cause, warm floor, severity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities.cluster import (
    AssessInput,
    ClusterActivities,
    LossReport,
    NodeFacts,
    PodFacts,
    RolloutFacts,
    detect_common_causes,
    severity_of,
)
from activities.config import ActivitySettings
from activities.effects import EffectRunner

from .conftest import (
    MODEL,
    NS,
    POOL,
    REV,
    Kube,
    add_deployment,
    build_pool,
    serving_pods,
    warm_labels,
)

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("pool_size", "lost", "largest_domain", "expected"),
    [
        (8, 1, 1, "capacity-event"),  # the runbook's anchor: one of eight
        (8, 3, 3, "outage"),  # the runbook's anchor: three of eight in one rack
        (8, 3, 1, "major"),  # the same three scattered over three racks
        (16, 2, 2, "major"),  # correlated but small
        (16, 2, 1, "capacity-event"),
        (8, 4, 1, "outage"),  # half the pool, wherever it was
        (8, 8, 4, "outage"),
        (0, 0, 0, "outage"),
    ],
)
def test_severity_grows_with_the_share_lost_and_its_concentration(
    pool_size: int, lost: int, largest_domain: int, expected: str
) -> None:
    severity, reason = severity_of(
        pool_size=pool_size, lost=lost, largest_domain_loss=largest_domain
    )
    assert severity == expected
    assert f"{lost} of {pool_size}" in reason


CRASH = "CrashLoopBackOff"


def _losses(n: int, spacing_s: float) -> list[LossReport]:
    return [
        LossReport(pod=f"p{i}", starts_at=T0 + timedelta(seconds=i * spacing_s)) for i in range(n)
    ]


def _node(name: str, **kw: object) -> NodeFacts:
    labels = {"fleetmend.io/node-pool": "h100", "topology.fleetmend.io/rack": f"rack-{name}"}
    return NodeFacts(name=name, labels=labels, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "pods", "nodes", "rollout", "expected"),
    [
        (
            "rollout in progress",
            [PodFacts(name="p0", lost=True), PodFacts(name="p1", lost=True)],
            [_node("a"), _node("b")],
            RolloutFacts(workload="Deployment/llm", in_progress=True, detail="updated 2/8"),
            {"rollout"},
        ),
        (
            "lost pods from two template hashes",
            [
                PodFacts(name="p0", lost=True, template_hash="aaa"),
                PodFacts(name="p1", lost=True, template_hash="bbb"),
            ],
            [_node("a"), _node("b")],
            RolloutFacts(workload="Deployment/llm", in_progress=False),
            {"rollout"},
        ),
        (
            "pods of one template crash-looping after a finished rollout",
            [
                PodFacts(name=f"p{i}", lost=True, template_hash="new", waiting_reasons=[CRASH])
                for i in range(2)
            ],
            [],
            RolloutFacts(workload="Deployment/llm", in_progress=False),
            {"rollout"},
        ),
        (
            "pods of one template restarted after errors, between two crashes",
            [
                PodFacts(name=f"p{i}", lost=True, template_hash="new", crashed=True)
                for i in range(2)
            ],
            [],
            RolloutFacts(workload="Deployment/llm", in_progress=False),
            {"rollout"},
        ),
        (
            "one crash-looping pod is not a revision's fault",
            [
                PodFacts(name="p0", lost=True, template_hash="new", waiting_reasons=[CRASH]),
                PodFacts(name="p1", lost=True, template_hash="new"),
            ],
            [],
            RolloutFacts(workload="Deployment/llm", in_progress=False),
            set(),
        ),
        (
            "image pull failures",
            [PodFacts(name="p0", lost=True, waiting_reasons=["ImagePullBackOff"])],
            [_node("a"), _node("b")],
            None,
            {"image-pull"},
        ),
        (
            "full node filesystem",
            [
                PodFacts(
                    name="p0",
                    lost=True,
                    reason="Evicted",
                    message="The node was low on resource: ephemeral-storage.",
                )
            ],
            [_node("a", conditions={"DiskPressure": "True"}), _node("b")],
            None,
            {"node-filesystem-full"},
        ),
        (
            "node-pool operation",
            [],
            [_node("a", unschedulable=True), _node("b", taints=["ToBeDeletedByClusterAutoscaler"])],
            None,
            {"node-pool-operation"},
        ),
        (
            "one fabric domain",
            [],
            [
                NodeFacts(name="a", labels={"fleetmend.io/fabric-domain": "f1"}),
                NodeFacts(name="b", labels={"fleetmend.io/fabric-domain": "f1"}),
            ],
            None,
            {"fabric-domain"},
        ),
        ("four coincidences", [], [_node("a"), _node("b")], None, set()),
    ],
)
def test_several_losses_inside_a_minute_are_checked_for_one_cause(
    case: str,
    pods: list[PodFacts],
    nodes: list[NodeFacts],
    rollout: RolloutFacts | None,
    expected: set[str],
) -> None:
    findings = detect_common_causes(
        losses=_losses(2, 20),
        pods=pods,
        lost_nodes=nodes,
        rollout=rollout,
        settings=ActivitySettings(),
    )
    assert {f.cause for f in findings} == expected, case


def test_losses_a_minute_apart_are_not_searched_for_a_common_cause() -> None:
    nodes = [
        NodeFacts(name="a", labels={"fleetmend.io/fabric-domain": "f1"}),
        NodeFacts(name="b", labels={"fleetmend.io/fabric-domain": "f1"}),
    ]
    findings = detect_common_causes(
        losses=_losses(2, 300), pods=[], lost_nodes=nodes, rollout=None, settings=ActivitySettings()
    )
    assert findings == []


# ---------------------------------------------------------------------------- over HTTP


def _assess(kube: Kube, runner: EffectRunner, settings: ActivitySettings, losses: list[LossReport]):
    acts = ClusterActivities(kube.api, runner, settings)
    return ActivityEnvironment().run(
        acts.assess_loss, AssessInput(namespace=NS, pool=POOL, losses=losses)
    )


def test_one_replica_of_eight_is_a_capacity_event_with_the_warm_floor_read(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=8, warm=2)
    # Spares that must not count: another revision of the model, and another model.
    add_deployment(
        kube.cluster,
        "llm-warm-old",
        1,
        warm_labels(rev="r6"),
        {"app": POOL, "pool": "warm", "model-revision": "r6"},
    )
    add_deployment(
        kube.cluster,
        "embed-warm",
        1,
        warm_labels(pool="embed", model="e5"),
        {"app": "embed", "pool": "warm"},
    )
    victim = serving_pods(kube.cluster)[0]
    kube.cluster.container_died(NS, victim["metadata"]["name"])

    result = _assess(
        kube, runner, settings, [LossReport(pod=victim["metadata"]["name"], starts_at=T0)]
    )

    assert result.pool_size == 8
    assert result.lost_replicas == [victim["metadata"]["name"]]
    assert result.lost_fraction == pytest.approx(1 / 8)
    assert result.severity == "capacity-event"
    assert result.domains.nodes == [victim["spec"]["nodeName"]]
    assert len(result.domains.racks) == 1 and len(result.domains.zones) == 1
    assert len(result.survivors) == 7
    assert all(s.metrics_url and s.metrics_url.endswith(":8000") for s in result.survivors)
    assert (result.model, result.revision) == (MODEL, REV)
    assert result.warm_floor.count == 2
    assert all(p.labels["model-revision"] == REV for p in result.warm_floor.ready)
    assert any("r6" in why for why in result.warm_floor.excluded.values())
    assert result.common_causes == []


def test_three_of_eight_in_one_rack_is_an_outage_with_a_fabric_cause(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=8, warm=0)
    by_rack: dict[str, list[dict]] = {}
    nodes = {n["metadata"]["name"]: n for n in kube.store.list("nodes")}
    for p in serving_pods(kube.cluster):
        rack = nodes[p["spec"]["nodeName"]]["metadata"]["labels"]["topology.fleetmend.io/rack"]
        by_rack.setdefault(rack, []).append(p)
    rack, members = max(by_rack.items(), key=lambda kv: len(kv[1]))
    assert len(members) >= 3
    lost = members[:3]
    losses = [
        LossReport(
            pod=p["metadata"]["name"],
            node=p["spec"]["nodeName"],
            starts_at=T0 + timedelta(seconds=10 * i),
        )
        for i, p in enumerate(lost)
    ]
    for p in lost:
        kube.cluster.container_died(NS, p["metadata"]["name"])

    result = _assess(kube, runner, settings, losses)

    assert result.severity == "outage"
    assert result.domains.racks == [rack]
    assert result.largest_domain_loss == 3
    assert sorted(result.lost_replicas) == sorted(p["metadata"]["name"] for p in lost)
    causes = {c.cause: c for c in result.common_causes}
    assert "fabric-domain" in causes
    assert causes["fabric-domain"].evidence["domain"] == f"fabric-{rack}"
    assert result.warm_floor.count == 0


def test_the_pool_size_comes_from_the_deployment_that_selects_the_pool_whatever_its_name(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    from .conftest import add_nodes, add_service, serving_labels

    add_nodes(kube.cluster, ["n0", "n1"], rack="rack-a", zone="zone-a")
    # Not named after the pool: found by the selector that matches the pool's serving pods.
    add_deployment(kube.cluster, "llm-v2", 4, serving_labels(), {"app": POOL, "pool": "serving"})
    add_service(kube.cluster, POOL, {"app": POOL, "serving": "true"})

    result = _assess(kube, runner, settings, [])

    assert result.workload_kind == "Deployment" and result.workload_name == "llm-v2"
    assert result.pool_size == 4


def test_a_replacement_still_pending_is_not_counted_as_a_second_loss(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=8, warm=0, nodes_per_rack=2)  # exactly full
    victim = serving_pods(kube.cluster)[0]["metadata"]["name"]
    # Deleted with a grace period: it keeps its GPUs, so its replacement stays Pending.
    kube.store.delete("pods", victim, namespace=NS)
    pending = [p for p in serving_pods(kube.cluster) if not p["spec"].get("nodeName")]
    assert len(pending) == 1

    result = _assess(kube, runner, settings, [LossReport(pod=victim, starts_at=T0)])

    assert result.lost_replicas == [victim]
    assert result.pool_size == 8 and result.severity == "capacity-event"
    assert pending[0]["metadata"]["name"] not in {s.name for s in result.survivors}
