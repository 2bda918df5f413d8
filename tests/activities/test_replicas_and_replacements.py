"""A LeaderWorkerSet group is one replica (a warm spare counted and promoted by its leader),
and a controller's replacements are told apart from the pods an incident already knows."""

from __future__ import annotations

from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, PromoteWarmInput, ReplacementsInput
from activities.config import ActivitySettings
from activities.effects import EffectRunner

from .conftest import MODEL, NS, POOL, REV, Kube, add_nodes, build_pool, pod_template, pods

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def _acts(kube: Kube, runner: EffectRunner, settings: ActivitySettings) -> ClusterActivities:
    return ClusterActivities(kube.api, runner, settings)


def test_a_warm_group_of_two_pods_is_one_spare_promoted_by_its_leader(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["n0", "n1", "n2", "n3"], rack="rack-a", zone="zone-a")
    warm = {"app": POOL, "pool": "warm", "model": MODEL, "model-revision": REV}
    kube.store.create(
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": f"{POOL}-warm"},
            "spec": {
                "replicas": 2,
                "leaderWorkerTemplate": {"size": 2, "workerTemplate": pod_template(warm)},
            },
        },
        namespace=NS,
    )
    group_pods = pods(kube.cluster, f"{LWS_NAME}={POOL}-warm")
    assert len(group_pods) == 4
    leaders = sorted(
        p["metadata"]["name"]
        for p in group_pods
        if p["metadata"]["labels"].get(WORKER_INDEX, "0") == "0"
    )
    op = PromoteWarmInput(
        op_id="i/promote", incident_id="i", namespace=NS, pool=POOL, model=MODEL, revision=REV
    )

    result = ActivityEnvironment().run(_acts(kube, runner, settings).promote_warm, op)

    # Every qualifying spare is promoted: two groups, each by its leader, no worker alone.
    assert sorted(r.name for r in result.promoted) == leaders


def test_replacements_are_the_pools_pods_the_incident_does_not_know_yet(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=3, warm=1, nodes_per_rack=2)
    serving = sorted(p["metadata"]["name"] for p in pods(kube.cluster, f"app={POOL},pool=serving"))
    known, new = serving[:2], serving[2]

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).find_replacements,
        ReplacementsInput(namespace=NS, pool=POOL, known=known),
    )

    # The warm spare is not a replacement, nor is any pod the incident already knows.
    assert [(r.pod.name, r.ready) for r in result.replacements] == [(new, True)]
