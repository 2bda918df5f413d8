"""Promote warm, provision (scale, lead time), reschedule (Pending pods, fragmentation)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.cluster import (
    ClusterActivities,
    DemoteWarmInput,
    LeadTimeInput,
    PendingInput,
    PendingPod,
    PromoteWarmInput,
    ScaleInput,
    diagnose_scheduling,
    lead_time_from_samples,
)
from activities.config import ActivitySettings
from activities.effects import STAMP_ANNOTATION, EffectRunner

from .conftest import (
    MODEL,
    NS,
    POOL,
    REV,
    Kube,
    add_deployment,
    add_nodes,
    build_pool,
    pods,
    serving_labels,
    warm_labels,
)


def _acts(kube: Kube, runner: EffectRunner, settings: ActivitySettings) -> ClusterActivities:
    return ClusterActivities(kube.api, runner, settings)


# ---------------------------------------------------------------------------- promote warm


def test_promote_warm_selects_exactly_this_model_and_revision(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=2, warm=2, nodes_per_rack=3)
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
    acts = _acts(kube, runner, settings)
    op = PromoteWarmInput(
        op_id="i/promote", incident_id="i", namespace=NS, pool=POOL, model=MODEL, revision=REV
    )

    result = ActivityEnvironment().run(acts.promote_warm, op)

    promoted = sorted(r.name for r in result.promoted)
    exact = [
        p["metadata"]["name"]
        for p in pods(kube.cluster, f"app={POOL},pool=warm,model-revision={REV}")
    ]
    assert promoted == sorted(exact) and len(promoted) == 2
    for name in promoted:
        pod = kube.store.get("pods", name, namespace=NS)
        assert pod["metadata"]["labels"]["serving"] == "true"
        assert pod["metadata"]["annotations"][STAMP_ANNOTATION] == "i/promote"
    # A bare pool=warm would have taken these too.
    for other in pods(kube.cluster, "pool=warm,model-revision=r6") + pods(
        kube.cluster, "app=embed"
    ):
        assert "serving" not in other["metadata"]["labels"]
    assert result.applied_now

    again = ActivityEnvironment().run(acts.promote_warm, op)
    assert not again.applied_now and sorted(r.name for r in again.promoted) == promoted


def test_promote_warm_by_weight_gives_a_probe_share_and_demote_undoes_it(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=1, warm=1, nodes_per_rack=1)
    acts = _acts(kube, runner, settings)
    env = ActivityEnvironment()
    result = env.run(
        acts.promote_warm,
        PromoteWarmInput(
            op_id="i/promote",
            incident_id="i",
            namespace=NS,
            pool=POOL,
            model=MODEL,
            revision=REV,
            mode="weight",
            weight=5,
            count=1,
        ),
    )
    (ref,) = result.promoted
    pod = kube.store.get("pods", ref.name, namespace=NS)
    assert pod["metadata"]["annotations"]["router.fleetmend.io/weight"] == "5"

    env.run(
        acts.demote_warm,
        DemoteWarmInput(
            op_id="i/promote/undo", incident_id="i", namespace=NS, pods=[ref.name], mode="weight"
        ),
    )
    pod = kube.store.get("pods", ref.name, namespace=NS)
    assert "serving" not in pod["metadata"]["labels"]
    assert "router.fleetmend.io/weight" not in (pod["metadata"].get("annotations") or {})


def test_a_warm_spare_on_a_cordoned_node_is_not_promoted(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=1, warm=2, nodes_per_rack=2)
    spares = pods(kube.cluster, f"app={POOL},pool=warm")
    bad_node = spares[0]["spec"]["nodeName"]
    kube.store.patch("nodes", bad_node, {"spec": {"unschedulable": True}})
    on_bad = {p["metadata"]["name"] for p in spares if p["spec"]["nodeName"] == bad_node}

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).promote_warm,
        PromoteWarmInput(
            op_id="i/p", incident_id="i", namespace=NS, pool=POOL, model=MODEL, revision=REV
        ),
    )

    assert on_bad and not on_bad & {r.name for r in result.promoted}
    assert all("cordoned" in result.skipped[name] for name in on_bad)


# ---------------------------------------------------------------------------- provision


def test_scale_rebuilds_the_warm_floor_and_records_the_previous_size(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=1, warm=1, nodes_per_rack=2)
    acts = _acts(kube, runner, settings)
    op = ScaleInput(op_id="i/scale", incident_id="i", namespace=NS, name=f"{POOL}-warm", replicas=3)

    result = ActivityEnvironment().run(acts.scale_pool, op)

    assert (result.previous_replicas, result.replicas, result.applied_now) == (1, 3, True)
    deployment = kube.store.get("deployments", f"{POOL}-warm", namespace=NS)
    assert deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["annotations"][STAMP_ANNOTATION] == "i/scale"
    assert len(pods(kube.cluster, f"app={POOL},pool=warm")) == 3

    again = ActivityEnvironment().run(acts.scale_pool, op)
    assert not again.applied_now and again.previous_replicas == 1


@pytest.mark.parametrize(
    ("samples", "default", "expected"),
    [
        ([], 900.0, (900.0, "default")),
        ([300.0], 900.0, (300.0, "observed")),
        ([300.0, 420.0, 600.0], 900.0, (600.0, "observed")),
        ([60.0 * i for i in range(1, 11)], 900.0, (540.0, "observed")),
    ],
)
def test_lead_time_is_a_high_quantile_of_past_startups_else_the_default(
    samples: list[float], default: float, expected: tuple[float, str]
) -> None:
    assert lead_time_from_samples(samples, default) == expected


def _started(kube: Kube, name: str, seconds: float) -> None:
    def edit(pod: dict[str, Any]) -> None:
        created = datetime.fromisoformat(
            pod["metadata"]["creationTimestamp"].replace("Z", "+00:00")
        )
        ready_at = (created + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for c in pod["status"]["conditions"]:
            if c["type"] == "Ready":
                c["lastTransitionTime"] = ready_at

    kube.store.mutate("pods", name, edit, namespace=NS)


def test_lead_time_is_estimated_from_observed_pod_startups(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=3, warm=0, nodes_per_rack=2)
    for seconds, pod in zip((300, 420, 600), pods(kube.cluster, f"app={POOL}"), strict=True):
        _started(kube, pod["metadata"]["name"], seconds)

    observed = ActivityEnvironment().run(
        _acts(kube, runner, settings).estimate_lead_time, LeadTimeInput(namespace=NS, pool=POOL)
    )
    nothing = ActivityEnvironment().run(
        _acts(kube, runner, settings).estimate_lead_time,
        LeadTimeInput(namespace=NS, pool="no-such-pool", default_s=1200),
    )

    assert (observed.seconds, observed.source) == (600.0, "observed")
    assert observed.samples == [300.0, 420.0, 600.0]
    assert (nothing.seconds, nothing.source) == (1200.0, "default")


# ---------------------------------------------------------------------------- reschedule


def _pending(gpus: int, message: str) -> PendingPod:
    return PendingPod(
        pod="p", gpus_requested=gpus, reasons=["FailedScheduling"], messages=[message]
    )


@pytest.mark.parametrize(
    ("pending", "free", "expected"),
    [
        ([], {"a": 8}, "none-pending"),
        (
            [_pending(4, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")],
            {"a": 2, "b": 2, "c": 2},
            "fragmentation",
        ),
        (
            [_pending(4, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")],
            {"a": 1, "b": 1},
            "shortage",
        ),
        ([_pending(4, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")], {}, "shortage"),
        (
            [_pending(4, "0/1 nodes are available: 1 node(s) didn't match node selector.")],
            {"a": 8},
            "unschedulable",
        ),
    ],
)
def test_free_gpus_without_an_admissible_placement_is_fragmentation_not_shortage(
    pending: list[PendingPod], free: dict[str, int], expected: str
) -> None:
    diagnosis, explanation, _ = diagnose_scheduling(pending, free)
    assert diagnosis == expected, explanation


def _fillers(kube: Kube, node: str, gpus: int) -> None:
    kube.store.create(
        "pods",
        {
            "metadata": {"name": f"filler-{node}", "labels": {"app": "filler"}},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "f",
                        "image": "x",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        },
        namespace=NS,
    )


def test_pending_pods_events_are_read_and_fragmentation_is_named(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["f0", "f1", "f2"], rack="rack-a", zone="zone-a")
    for node in ("f0", "f1", "f2"):
        _fillers(kube, node, 6)  # 2 GPUs free on each: 6 free, no block of 4
    add_deployment(kube.cluster, POOL, 1, serving_labels(), {"app": POOL, "pool": "serving"})

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).diagnose_pending, PendingInput(namespace=NS, pool=POOL)
    )

    assert result.diagnosis == "fragmentation", result.explanation
    assert result.free_gpus_total == 6 and result.largest_free_block == 2
    (pending,) = result.pending
    assert pending.gpus_requested == 4
    assert "FailedScheduling" in pending.reasons
    assert any("Insufficient nvidia.com/gpu" in m for m in pending.messages)


def test_no_free_gpus_anywhere_is_a_plain_shortage(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["s0"], rack="rack-a", zone="zone-a")
    _fillers(kube, "s0", 8)
    add_deployment(kube.cluster, POOL, 1, serving_labels(), {"app": POOL, "pool": "serving"})

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).diagnose_pending, PendingInput(namespace=NS, pool=POOL)
    )

    assert result.diagnosis == "shortage", result.explanation
    assert result.free_gpus_total == 0


def test_a_leaderworkerset_pool_is_scaled_through_its_scale_subresource(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    from .conftest import pod_template

    add_nodes(kube.cluster, ["n0", "n1", "n2", "n3"], rack="rack-a", zone="zone-a")
    kube.store.create(
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "big"},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 2,
                    "workerTemplate": pod_template(warm_labels("big")),
                },
            },
        },
        namespace=NS,
    )

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).scale_pool,
        ScaleInput(
            op_id="i/scale/big",
            incident_id="i",
            namespace=NS,
            kind="LeaderWorkerSet",
            name="big",
            replicas=2,
        ),
    )

    assert (result.previous_replicas, result.replicas, result.applied_now) == (1, 2, True)
    lws = kube.store.get("leaderworkersets", "big", namespace=NS)
    assert lws["spec"]["replicas"] == 2
    assert lws["metadata"]["annotations"][STAMP_ANNOTATION] == "i/scale/big"
    assert len(pods(kube.cluster, "leaderworkerset.sigs.k8s.io/name=big")) == 4
