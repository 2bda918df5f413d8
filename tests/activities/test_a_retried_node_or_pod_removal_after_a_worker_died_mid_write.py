"""A retry after the worker died inside relocate_misplaced_pod (and its uncordon) or
force_delete_pod, the activities no drill reaches (README, Process faults).

As in `test_a_retry_after_a_worker_died_mid_write.py`: the write took effect, the worker
died before the ledger recorded it, and the retry runs on fleetsim's API server with the
heartbeat details Temporal would hand it. A heartbeat is throttled (at most one per 80%
of the heartbeat timeout after the first), so a worker SIGKILLed within seconds of the
activity's first heartbeat leaves the retry only that first one. Writes are counted by
fleetsim's API server, per operation id and object.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, ForceDeleteInput, RelocateInput
from activities.config import ActivitySettings
from activities.effects import EffectRunner

from .conftest import (
    NS,
    POOL,
    Kube,
    add_deployment,
    add_nodes,
    build_pool,
    serving_labels,
    serving_pods,
    uncordon,
)
from .test_a_retry_after_a_worker_died_mid_write import DiesAfterWriting, WorkerDied

WRONG, RIGHT = "a100-0", "h100-0"
RELOCATE = "i/roll-back/relocate"


def misplaced_pod(kube: Kube) -> str:
    """One serving pod on a node of the wrong pool, and a right node free for it."""
    add_nodes(kube.cluster, [WRONG], rack="rack-z", zone="zone-z", labels={"np": "a100"})
    add_deployment(kube.cluster, POOL, 1, serving_labels(), {"app": POOL, "pool": "serving"})
    (pod,) = serving_pods(kube.cluster)
    assert pod["spec"]["nodeName"] == WRONG
    add_nodes(kube.cluster, [RIGHT], rack="rack-a", zone="zone-a")
    return str(pod["metadata"]["name"])


def relocate(pod: str) -> RelocateInput:
    return RelocateInput(
        op_id=RELOCATE, incident_id="i", namespace=NS, pod=pod, wait_rescheduled_s=10
    )


def die_in_relocation(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings, pod: str, write: str
) -> list[dict[str, Any]]:
    """Run the relocation until the worker dies after `write`; the heartbeats it sent."""
    beats: list[dict[str, Any]] = []
    dead = ActivityEnvironment()
    dead.on_heartbeat = lambda *details: beats.append(details[0]) if details else None
    acts = ClusterActivities(
        kube.api, DiesAfterWriting(runner, only=f"{RELOCATE}/{write}"), settings
    )
    with pytest.raises(WorkerDied):
        dead.run(acts.relocate_misplaced_pod, relocate(pod))
    return beats


def confirmed_by_the_retry(runner: EffectRunner, op_id: str) -> bool:
    """The ledger shows the operation confirmed on its second attempt, the dead one first."""
    record = runner.ledger.get(op_id)
    return record is not None and (record.state, record.attempts) == ("confirmed", 2)


def writes_by_op(kube: Kube) -> dict[str, int]:
    return dict(kube.server.mutations.summary()["by_op_id_and_object"])


def test_a_relocation_killed_in_its_cordon_write_still_uncordons_the_node_it_cordoned(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    pod = misplaced_pod(kube)
    beats = die_in_relocation(kube, runner, settings, pod, "cordon")
    assert beats == [] and kube.store.get("nodes", WRONG)["spec"]["unschedulable"] is True

    # The retry starts with no heartbeat: the node it finds cordoned is the dead attempt's.
    result = ActivityEnvironment().run(
        ClusterActivities(kube.api, runner, settings).relocate_misplaced_pod, relocate(pod)
    )

    assert result.steps == ["cordon", "delete", "rescheduled", "uncordon"]
    assert result.replacement_node == RIGHT
    assert not kube.store.get("nodes", WRONG)["spec"].get("unschedulable")
    assert {k: n for k, n in writes_by_op(kube).items() if n != 1} == {}
    assert f"{RELOCATE}/cordon nodes/{WRONG}" in writes_by_op(kube)


def test_a_relocation_of_a_node_cordoned_before_it_leaves_that_node_cordoned(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    pod = misplaced_pod(kube)
    kube.store.patch("nodes", WRONG, {"spec": {"unschedulable": True}})

    result = ActivityEnvironment().run(
        ClusterActivities(kube.api, runner, settings).relocate_misplaced_pod, relocate(pod)
    )

    assert "uncordon" not in result.steps
    assert kube.store.get("nodes", WRONG)["spec"]["unschedulable"] is True


def test_a_relocation_killed_in_its_uncordon_write_is_finished_without_writing_again(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    pod = misplaced_pod(kube)
    beats = die_in_relocation(kube, runner, settings, pod, "uncordon")
    assert not kube.store.get("nodes", WRONG)["spec"].get("unschedulable")
    before = writes_by_op(kube)

    # Throttled: Temporal kept the first heartbeat (after the cordon) and none after it.
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, heartbeat_details=[beats[0]])
    result = retry.run(
        ClusterActivities(kube.api, runner, settings).relocate_misplaced_pod, relocate(pod)
    )

    assert result.wrong_node == WRONG and result.replacement_node == RIGHT
    assert result.steps[-1] == "uncordon"
    assert writes_by_op(kube) == before
    assert {k: n for k, n in before.items() if n != 1} == {}
    assert confirmed_by_the_retry(runner, f"{RELOCATE}/uncordon")


def test_an_uncordon_killed_after_its_write_is_confirmed_by_the_retry_without_writing_again(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["n0"], rack="rack-a", zone="zone-a")
    kube.store.patch("nodes", "n0", {"spec": {"unschedulable": True}})
    op_id = "i/relocate/n0/uncordon"
    with pytest.raises(WorkerDied):
        uncordon(ClusterActivities(kube.api, DiesAfterWriting(runner), settings), "n0", op_id)
    assert kube.server.mutations.writes(op_id) == 1

    retry = uncordon(ClusterActivities(kube.api, runner, settings), "n0", op_id)

    assert not retry.unschedulable and not retry.applied_now
    assert kube.server.mutations.writes(op_id) == 1
    assert confirmed_by_the_retry(runner, op_id)


def test_a_force_delete_killed_after_its_delete_is_not_sent_again_by_the_retry(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=1, warm=0, nodes_per_rack=1)
    pod = serving_pods(kube.cluster)[0]
    op = ForceDeleteInput(
        op_id="i/deroute/victim/force-delete",
        incident_id="i",
        namespace=NS,
        pod=pod["metadata"]["name"],
        approved_by="oncall",
        uid=pod["metadata"]["uid"],
    )
    with pytest.raises(WorkerDied):
        ActivityEnvironment().run(
            ClusterActivities(kube.api, DiesAfterWriting(runner), settings).force_delete_pod, op
        )
    deletes = [m for m in kube.server.mutations.entries() if m.method == "DELETE"]
    assert [m.object for m in deletes] == [f"pods/{NS}/{op.pod}"]

    retry = ActivityEnvironment().run(
        ClusterActivities(kube.api, runner, settings).force_delete_pod, op
    )

    assert retry.deleted and retry.approved_by == "oncall"
    assert [m for m in kube.server.mutations.entries() if m.method == "DELETE"] == deletes
    assert kube.server.mutations.writes(op.op_id) == 1
    assert kube.store.try_get("pods", op.pod, namespace=NS) is None


def test_a_relocation_killed_in_its_delete_write_does_not_delete_again(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    pod = misplaced_pod(kube)
    beats = die_in_relocation(kube, runner, settings, pod, "delete")
    deletes = [m for m in kube.server.mutations.entries() if m.method == "DELETE"]
    assert [m.object for m in deletes] == [f"pods/{NS}/{pod}"]

    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, heartbeat_details=[beats[0]])
    result = retry.run(
        ClusterActivities(kube.api, runner, settings).relocate_misplaced_pod, relocate(pod)
    )

    assert result.steps == ["cordon", "delete", "rescheduled", "uncordon"]
    assert result.replacement_node == RIGHT
    assert [m for m in kube.server.mutations.entries() if m.method == "DELETE"] == deletes
    assert {k: n for k, n in writes_by_op(kube).items() if n != 1} == {}
    assert not kube.store.get("nodes", WRONG)["spec"].get("unschedulable")
