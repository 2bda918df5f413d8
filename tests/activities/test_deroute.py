"""Deroute: conditions not addresses, the controller's selector, LWS groups, force delete."""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.cluster import (
    ClusterActivities,
    DerouteInput,
    ForceDeleteInput,
    RoutingStateInput,
)
from activities.config import ActivitySettings
from activities.effects import STAMP_ANNOTATION, EffectRunner
from fleetsim.kube.chaos import ApiFault

from .conftest import (
    NS,
    POOL,
    Kube,
    add_deployment,
    add_nodes,
    add_service,
    build_pool,
    pod_template,
    serving_pods,
)

INCIDENT = "replica-loss/serving/llm"


def _acts(kube: Kube, runner: EffectRunner, settings: ActivitySettings) -> ClusterActivities:
    return ClusterActivities(kube.api, runner, settings)


def _labels(kube: Kube, name: str) -> dict[str, str]:
    return kube.store.get("pods", name, namespace=NS)["metadata"].get("labels") or {}


def test_routing_state_reads_conditions_and_publish_not_ready_addresses(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["n0", "n1"], rack="rack-a", zone="zone-a")
    add_deployment(kube.cluster, "pn", 2, {"app": "pn", "serving": "true"}, {"app": "pn"})
    add_service(kube.cluster, "pn", {"app": "pn", "serving": "true"}, publish_not_ready=True)
    add_service(kube.cluster, "plain", {"app": "pn", "serving": "true"})
    names = sorted(p["metadata"]["name"] for p in kube.store.list("pods", namespace=NS))
    kube.cluster.set_pod_ready(NS, names[0], False)
    acts = _acts(kube, runner, settings)

    plain = ActivityEnvironment().run(
        acts.read_routing_state, RoutingStateInput(namespace=NS, service="plain", pods=names)
    )
    published = ActivityEnvironment().run(
        acts.read_routing_state, RoutingStateInput(namespace=NS, service="pn", pods=names)
    )

    # Listed is not routable: the not-ready pod keeps its address with ready=false.
    assert plain.publish_not_ready_addresses is False
    plain_by_pod = {e.pod: e for e in plain.endpoints}
    assert set(plain_by_pod) == set(names)
    assert plain_by_pod[names[0]].ready is False and plain_by_pod[names[0]].serving is False
    assert set(plain.still_routable) == {names[1]}
    # With publishNotReadyAddresses the same pod is routable anyway, and is reported so.
    assert published.publish_not_ready_addresses is True
    assert set(published.still_routable) == set(names)


def test_deroute_removes_the_router_label_and_confirms_the_endpoint_left(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=3, warm=0, nodes_per_rack=2)
    victim = serving_pods(kube.cluster)[0]["metadata"]["name"]
    acts = _acts(kube, runner, settings)
    op = DerouteInput(
        op_id=f"{INCIDENT}/deroute/{victim}",
        incident_id=INCIDENT,
        namespace=NS,
        service=POOL,
        pod=victim,
    )

    first = ActivityEnvironment().run(acts.deroute_replica, op)

    assert first.confirmed and first.applied_now
    assert first.pods == [victim]
    assert "serving" not in _labels(kube, victim)
    assert _labels(kube, victim)["app"] == POOL  # the controller's label stays
    pod = kube.store.get("pods", victim, namespace=NS)
    assert pod["metadata"]["annotations"][STAMP_ANNOTATION] == op.op_id
    assert first.routing is not None and victim not in first.routing.still_routable
    assert "Deployment/llm" in first.controller_selector
    # The controller did not replace the pod: it still counts it.
    assert len(serving_pods(kube.cluster)) == 3

    again = ActivityEnvironment().run(acts.deroute_replica, op)
    assert again.confirmed and not again.applied_now


def test_deroute_refuses_to_remove_a_label_the_controller_selects_on(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["n0"], rack="rack-a", zone="zone-a")
    add_deployment(
        kube.cluster, "bad", 1, {"app": "bad", "serving": "true"}, {"app": "bad", "serving": "true"}
    )
    add_service(kube.cluster, "bad", {"app": "bad", "serving": "true"})
    victim = kube.store.list("pods", namespace=NS)[0]["metadata"]["name"]

    with pytest.raises(ApplicationError) as refused:
        ActivityEnvironment().run(
            _acts(kube, runner, settings).deroute_replica,
            DerouteInput(
                op_id="i/deroute/bad", incident_id="i", namespace=NS, service="bad", pod=victim
            ),
        )

    assert refused.value.non_retryable
    assert "Deployment/bad selects on it" in str(refused.value)
    assert "replacement" in str(refused.value)
    assert _labels(kube, victim)["serving"] == "true"


def _lws(kube: Kube, name: str, replicas: int, size: int) -> None:
    labels = {"app": name, "serving": "true"}
    kube.store.create(
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "leaderWorkerTemplate": {"size": size, "workerTemplate": pod_template(labels)},
            },
        },
        namespace=NS,
    )


def test_losing_one_rank_deroutes_the_whole_leaderworkerset_group(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    add_nodes(kube.cluster, ["n0", "n1", "n2", "n3"], rack="rack-a", zone="zone-a")
    _lws(kube, "big", replicas=2, size=2)
    add_service(kube.cluster, "big", {"app": "big", "serving": "true"})
    assert len(kube.store.list("pods", namespace=NS)) == 4

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).deroute_replica,
        DerouteInput(
            op_id="i/deroute/big-0-1", incident_id="i", namespace=NS, service="big", pod="big-0-1"
        ),
    )

    assert result.group == "big-0"
    assert result.pods == ["big-0", "big-0-1"]
    assert result.confirmed
    assert "serving" not in _labels(kube, "big-0") and "serving" not in _labels(kube, "big-0-1")
    assert _labels(kube, "big-1")["serving"] == "true"
    assert _labels(kube, "big-1-1")["serving"] == "true"


def test_a_dry_run_deroute_changes_nothing(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=2, warm=0, nodes_per_rack=1)
    victim = serving_pods(kube.cluster)[0]["metadata"]["name"]

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).deroute_replica,
        DerouteInput(
            op_id="i/dry", incident_id="i", namespace=NS, service=POOL, pod=victim, dry_run=True
        ),
    )

    assert not result.applied_now and not result.confirmed
    assert _labels(kube, victim)["serving"] == "true"


def test_force_delete_refuses_without_the_approval_gate(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=1, warm=0, nodes_per_rack=1)
    victim = serving_pods(kube.cluster)[0]["metadata"]["name"]

    with pytest.raises(ApplicationError) as refused:
        ActivityEnvironment().run(
            _acts(kube, runner, settings).force_delete_pod,
            ForceDeleteInput(op_id="i/force", incident_id="i", namespace=NS, pod=victim),
        )

    assert refused.value.non_retryable and "approval" in str(refused.value)
    assert kube.store.try_get("pods", victim, namespace=NS) is not None


def test_force_delete_with_approval_deletes_without_grace(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=1, warm=0, nodes_per_rack=1)
    pod = serving_pods(kube.cluster)[0]
    victim, uid = pod["metadata"]["name"], pod["metadata"]["uid"]

    result = ActivityEnvironment().run(
        _acts(kube, runner, settings).force_delete_pod,
        ForceDeleteInput(
            op_id="i/force",
            incident_id="i",
            namespace=NS,
            pod=victim,
            approved_by="oncall",
            uid=uid,
        ),
    )

    assert result.deleted and result.applied_now and result.approved_by == "oncall"
    # Grace period 0: gone at once, not terminating for 30 s.
    assert kube.store.try_get("pods", victim, namespace=NS) is None


def _underoutable_pod(kube: Kube) -> DerouteInput:
    """A pod whose Service ignores the router-only label: removing it cannot deroute it."""
    add_nodes(kube.cluster, ["n0"], rack="rack-a", zone="zone-a")
    add_deployment(kube.cluster, "plain", 1, {"app": "plain", "serving": "true"}, {"app": "plain"})
    add_service(kube.cluster, "plain", {"app": "plain"})
    victim = kube.store.list("pods", namespace=NS)[0]["metadata"]["name"]
    return DerouteInput(
        op_id="i/deroute/plain",
        incident_id="i",
        namespace=NS,
        service="plain",
        pod=victim,
        confirm_timeout_s=0.3,
    )


def test_deroute_is_not_reported_done_while_the_endpoint_stays_in_the_ready_set(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    op = _underoutable_pod(kube)

    with pytest.raises(ApplicationError) as pending:
        ActivityEnvironment().run(_acts(kube, runner, settings).deroute_replica, op)

    assert not pending.value.non_retryable
    assert "still in the ready set" in str(pending.value)
    record = runner.ledger.get("i/deroute/plain")
    assert record is not None and record.state == "applied"  # done, but not confirmed


def test_a_deroute_whose_patch_failed_is_applied_by_its_retry_though_the_pod_is_unready(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    # A dead replica is out of the ready set before fleetmend acts, and its container
    # comes back later with the label still on: only the label proves the deroute.
    build_pool(kube.cluster, replicas=3, warm=0, nodes_per_rack=2)
    victim = serving_pods(kube.cluster)[0]["metadata"]["name"]
    kube.cluster.set_pod_ready(NS, victim, False)
    acts = _acts(kube, runner, settings)
    op = DerouteInput(
        op_id=f"{INCIDENT}/deroute/{victim}",
        incident_id=INCIDENT,
        namespace=NS,
        service=POOL,
        pod=victim,
    )
    kube.server.chaos.open(ApiFault(answer="error", resources=["pods"]))
    with pytest.raises(ApplicationError) as refused:
        ActivityEnvironment().run(acts.deroute_replica, op)
    assert not refused.value.non_retryable and ": 500 " in refused.value.message
    assert _labels(kube, victim)["serving"] == "true"
    kube.server.chaos.close_all()

    retried = ActivityEnvironment().run(acts.deroute_replica, op)

    assert retried.applied_now and retried.confirmed
    assert "serving" not in _labels(kube, victim)
    assert kube.server.chaos.mutations.applied_twice() == {}


def test_the_last_confirming_attempt_reports_the_deroute_unconfirmed_for_the_force_delete_gate(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    op = _underoutable_pod(kube).model_copy(update={"confirm_attempts": 2})
    victim = op.pod
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)

    result = env.run(_acts(kube, runner, settings).deroute_replica, op)

    assert not result.confirmed and result.label_removed == "serving"
    assert result.routing is not None and victim in result.routing.still_routable
    assert "serving" not in _labels(kube, victim)
