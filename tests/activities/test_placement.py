"""A replica on a node pool its workload does not prefer is named by verification and moved."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.cluster import (
    PLACEMENT_CHECK,
    ClusterActivities,
    NodePoolPreference,
    RelocateInput,
    VerifyCapacityInput,
    misplaced_pods,
    preferred_node_pool,
)
from activities.config import ActivitySettings
from activities.effects import EffectRunner

from .conftest import (
    NS,
    POOL,
    Kube,
    add_deployment,
    add_nodes,
    add_service,
    serving_labels,
    serving_pods,
)

POOL_LABEL = "fleetmend.io/node-pool"


def _preferring(*terms: tuple[int, str, str, list[str]]) -> client.V1Affinity:
    return client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            preferred_during_scheduling_ignored_during_execution=[
                client.V1PreferredSchedulingTerm(
                    weight=weight,
                    preference=client.V1NodeSelectorTerm(
                        match_expressions=[
                            client.V1NodeSelectorRequirement(key=key, operator=op, values=values)
                        ]
                    ),
                )
                for weight, key, op, values in terms
            ]
        )
    )


def test_the_heaviest_preferred_term_on_a_node_pool_label_is_the_workloads_pool() -> None:
    affinity = _preferring(
        (10, POOL_LABEL, "In", ["a100"]),
        (90, POOL_LABEL, "In", ["h100", "h200"]),
        (100, "topology.kubernetes.io/zone", "In", ["zone-a"]),
        (100, POOL_LABEL, "NotIn", ["l4"]),
    )

    assert preferred_node_pool(affinity, [POOL_LABEL]) == NodePoolPreference(
        POOL_LABEL, frozenset({"h100", "h200"}), 90
    )


def test_a_workload_without_a_node_pool_preference_has_no_pool_to_be_misplaced_from() -> None:
    assert preferred_node_pool(None, [POOL_LABEL]) is None
    assert preferred_node_pool(client.V1Affinity(), [POOL_LABEL]) is None
    zone_only = _preferring((50, "topology.kubernetes.io/zone", "In", ["zone-a"]))
    assert preferred_node_pool(zone_only, [POOL_LABEL]) is None


def test_pods_on_other_pools_or_unlabelled_nodes_are_misplaced_and_unscheduled_ones_are_not() -> (
    None
):
    preference = NodePoolPreference(POOL_LABEL, frozenset({"h100"}), 1)
    nodes = {"h-0": {POOL_LABEL: "h100"}, "a-0": {POOL_LABEL: "a100"}, "bare-0": {}}
    pods: dict[str, str | None] = {"p0": "h-0", "p1": "a-0", "p2": "bare-0", "p3": None}

    assert misplaced_pods(pods, nodes, preference) == {"p1": "a100", "p2": None}


def _verify(acts: ClusterActivities, present_before: list[str] | None = None) -> Any:
    return ActivityEnvironment().run(
        acts.verify_capacity,
        VerifyCapacityInput(
            namespace=NS,
            pool=POOL,
            service=POOL,
            target_replicas=1,
            warm_floor_target=0,
            present_before=present_before,
        ),
    )


def _placement(result: Any) -> Any:
    return next(c for c in result.checks if c.name == PLACEMENT_CHECK)


def test_verification_names_a_replica_on_the_wrong_pool_and_relocation_clears_it(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    # Only an A100 node exists when the replacement is scheduled: the preference for
    # H100s cannot be honoured, so it lands on the A100.
    add_nodes(kube.cluster, ["a100-0"], rack="rack-z", zone="zone-z", labels={POOL_LABEL: "a100"})
    prefers_h100 = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [
                                {"key": POOL_LABEL, "operator": "In", "values": ["h100"]}
                            ]
                        },
                    }
                ]
            }
        }
    }
    add_deployment(
        kube.cluster, POOL, 1, serving_labels(), {"app": POOL, "pool": "serving"}, **prefers_h100
    )
    add_service(kube.cluster, POOL, {"app": POOL, "serving": "true"})
    (misplaced,) = serving_pods(kube.cluster)
    add_nodes(kube.cluster, ["h100-0"], rack="rack-a", zone="zone-a", labels={POOL_LABEL: "h100"})
    acts = ClusterActivities(kube.api, runner, settings)

    before = _verify(acts)

    placement = _placement(before)
    assert not placement.passed
    assert placement.evidence["misplaced"] == [misplaced["metadata"]["name"]]
    assert placement.evidence["pool_of_misplaced"] == {misplaced["metadata"]["name"]: "a100"}
    assert placement.evidence["preferred"] == {POOL_LABEL: ["h100"]}
    # It serves where it is: the roll-back moves it, the verification does not wait on it.
    assert before.passed, before

    # A replica that was there before the incident is not the incident's to move.
    assert _placement(_verify(acts, present_before=[misplaced["metadata"]["name"]])).passed

    moved = ActivityEnvironment().run(
        acts.relocate_misplaced_pod,
        RelocateInput(
            op_id="i/relocate",
            incident_id="i",
            namespace=NS,
            pod=placement.evidence["misplaced"][0],
            wait_rescheduled_s=10,
        ),
    )

    assert moved.replacement_node == "h100-0"
    after = _placement(_verify(acts))
    assert after.passed and after.evidence["misplaced"] == []
