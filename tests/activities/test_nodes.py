"""Nodes: cordon and label until qualified; a replacement on the wrong pool is relocated."""

from __future__ import annotations

from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, RelocateInput
from activities.config import ActivitySettings
from activities.effects import STAMP_ANNOTATION, EffectRunner

from .conftest import (
    NS,
    POOL,
    Kube,
    add_deployment,
    add_nodes,
    cordon,
    serving_labels,
    serving_pods,
    uncordon,
)


def test_cordon_labels_the_node_unqualified_and_uncordon_keeps_the_label(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["n0"], rack="rack-a", zone="zone-a")
    acts = ClusterActivities(kube.api, runner, settings)

    cordoned = cordon(acts, "n0", "i/cordon/n0", "Xid 79")
    node = kube.store.get("nodes", "n0")
    assert cordoned.unschedulable and cordoned.qualified_label == "false" and cordoned.applied_now
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][STAMP_ANNOTATION] == "i/cordon/n0"
    assert cordon(acts, "n0", "i/cordon/n0", "Xid 79").applied_now is False

    uncordoned = uncordon(acts, "n0", "i/cordon/n0/undo")
    node = kube.store.get("nodes", "n0")
    assert not uncordoned.unschedulable and not node["spec"].get("unschedulable")
    # Schedulable again, but not back in the serving pool until qualification passes.
    assert node["metadata"]["labels"]["fleetmend.io/qualified"] == "false"


def test_a_replacement_on_the_wrong_pool_is_cordoned_deleted_and_the_node_uncordoned(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(
        kube.cluster,
        ["a100-0"],
        rack="rack-z",
        zone="zone-z",
        labels={"fleetmend.io/node-pool": "a100"},
    )
    add_deployment(kube.cluster, POOL, 1, serving_labels(), {"app": POOL, "pool": "serving"})
    (misplaced,) = serving_pods(kube.cluster)
    assert misplaced["spec"]["nodeName"] == "a100-0"
    add_nodes(kube.cluster, ["h100-0"], rack="rack-a", zone="zone-a")

    result = ActivityEnvironment().run(
        ClusterActivities(kube.api, runner, settings).relocate_misplaced_pod,
        RelocateInput(
            op_id="i/relocate",
            incident_id="i",
            namespace=NS,
            pod=misplaced["metadata"]["name"],
            wait_rescheduled_s=10,
        ),
    )

    assert result.steps == ["cordon", "delete", "rescheduled", "uncordon"]
    assert result.wrong_node == "a100-0"
    assert result.replacement_node == "h100-0"
    assert result.replacement and result.replacement != misplaced["metadata"]["name"]
    assert not kube.store.get("nodes", "a100-0")["spec"].get("unschedulable")
    old = kube.store.try_get("pods", misplaced["metadata"]["name"], namespace=NS)
    assert old is None or old["metadata"].get("deletionTimestamp")
    ops = {r.op_id: r.state for r in runner.ledger.operations("i")}
    assert set(ops) == {"i/relocate/cordon", "i/relocate/delete", "i/relocate/uncordon"}
