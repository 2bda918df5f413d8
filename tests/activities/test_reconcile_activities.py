"""Reconciliation's activities: the ledger's intent, the stamps in the cluster, the findings."""

from __future__ import annotations

from sqlalchemy import text
from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, DerouteInput
from activities.config import ActivitySettings
from activities.effects import STAMP_ANNOTATION, EffectRunner
from activities.reconcile import (
    Finding,
    FindingsInput,
    LedgerQuery,
    ObserveInput,
    ReconcileActivities,
)

from .conftest import NS, POOL, Kube, build_pool, serving_pods

INCIDENT = "replica-loss/serving/llm@20261129T030000Z"


def _deroute(kube: Kube, runner: EffectRunner, settings: ActivitySettings, pod: str) -> str:
    op_id = f"{INCIDENT}/deroute/{pod}"
    ActivityEnvironment().run(
        ClusterActivities(kube.api, runner, settings).deroute_replica,
        DerouteInput(op_id=op_id, incident_id=INCIDENT, namespace=NS, service=POOL, pod=pod),
    )
    return op_id


def test_the_ledger_intent_and_the_stamps_in_the_cluster_are_read_side_by_side(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=3, warm=0, nodes_per_rack=2)
    victim, other = (p["metadata"]["name"] for p in serving_pods(kube.cluster)[:2])
    op_id = _deroute(kube, runner, settings, victim)
    acts = ReconcileActivities(runner.ledger, kube.api, settings)

    ops = ActivityEnvironment().run(acts.read_ledger_operations, LedgerQuery(incident_id=INCIDENT))
    assert [(o.op_id, o.kind, o.state) for o in ops.operations] == [
        (op_id, "deroute-pod", "confirmed")
    ]

    observed = ActivityEnvironment().run(
        acts.observe_effects, ObserveInput(operations=ops.operations)
    )
    assert [(e.op_id, e.present, e.occurrences) for e in observed.effects] == [(op_id, True, 1)]

    # The same stamp on a second object is the same effect applied twice.
    kube.store.patch(
        "pods", other, {"metadata": {"annotations": {STAMP_ANNOTATION: op_id}}}, namespace=NS
    )
    twice = ActivityEnvironment().run(acts.observe_effects, ObserveInput(operations=ops.operations))
    assert twice.effects[0].occurrences == 2
    assert f"{NS}/pod/{other}" in twice.effects[0].detail


def test_findings_are_stored_once_however_often_they_are_reported(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=2, warm=0, nodes_per_rack=2)
    victim = serving_pods(kube.cluster)[0]["metadata"]["name"]
    op_id = _deroute(kube, runner, settings, victim)
    acts = ReconcileActivities(runner.ledger, kube.api, settings)
    finding = Finding(kind="duplicate", op_id=op_id, target=f"{NS}/pod/{victim}", detail="x2")

    first = ActivityEnvironment().run(
        acts.store_findings, FindingsInput(incident_id=INCIDENT, findings=[finding])
    )
    again = ActivityEnvironment().run(
        acts.store_findings, FindingsInput(incident_id=INCIDENT, findings=[finding])
    )

    assert (first.stored, again.stored) == (1, 0)
    with runner.ledger.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT kind, op_id FROM reconciliation_findings WHERE incident_id = :i"),
            {"i": INCIDENT},
        ).all()
    assert [(r.kind, r.op_id) for r in rows] == [("duplicate", op_id)]


def test_an_operation_that_names_several_pods_may_stamp_each_of_them() -> None:
    from activities.reconcile import LedgerOperation, _meant_objects

    step = LedgerOperation(
        op_id="x/ramp/step-1",
        incident_id="x",
        kind="router-weights",
        target=f"{NS}/pod/llm-a",
        state="confirmed",
        intent={"ramp_step": 1},
        result={"weights": {"llm-a": 250, "llm-b": 250}},
    )
    assert _meant_objects(step) >= {f"{NS}/pod/llm-a", f"{NS}/pod/llm-b"}
    assert f"{NS}/pod/llm-c" not in _meant_objects(step)


def test_observing_heartbeats_before_each_read_of_the_cluster(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=3, warm=0, nodes_per_rack=2)
    for pod in (p["metadata"]["name"] for p in serving_pods(kube.cluster)[:2]):
        _deroute(kube, runner, settings, pod)
    acts = ReconcileActivities(runner.ledger, kube.api, settings)
    ops = ActivityEnvironment().run(acts.read_ledger_operations, LedgerQuery(incident_id=INCIDENT))
    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    env.run(acts.observe_effects, ObserveInput(operations=ops.operations))

    # One pod list for the namespace, then one read per distinct target.
    targets = {o.target for o in ops.operations}
    assert len(beats) == 1 + len(targets)
