"""A retry after the worker died between its Kubernetes write and the ledger's record.

The write took effect, the ledger still shows the operation proposed by an attempt that
never came back. The retry must find the earlier write by its op-id stamp, record it, and
report what it did, without writing again (writes counted by fleetsim's API server).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, PromoteWarmInput, ScaleInput
from activities.config import ActivitySettings
from activities.effects import STAMP_ANNOTATION as OP, EffectResult, EffectRunner, OperationSpec
from activities.gateway import (
    TIER_MODEL_FALLBACK,
    TIER_NONE,
    AnnotationGateway,
    GatewayActivities,
    PressureSummary,
    ShedTierInput,
)
from activities.ramp import RampActivities

from .conftest import MODEL, NS, POOL, REV, FleetHandle, Kube, build_pool, scenario
from .test_ramp import _cold_replacement as cold_replacement, ramp_input


class WorkerDied(BaseException):
    """The process ended right after the write (SIGKILL): nothing below it ran."""


class DiesAfterWriting:
    """An EffectRunner whose worker dies once `apply` has written, before the ledger records.

    With `only`: it dies in that operation's write; the operations before it run as usual.
    """

    def __init__(self, runner: EffectRunner, only: str | None = None) -> None:
        self.ledger = runner.ledger
        self._runner = runner
        self._only = only

    def run(
        self,
        spec: OperationSpec,
        apply: Callable[[str], Mapping[str, Any] | None],
        confirm: Callable[[str], Mapping[str, Any] | None] | None = None,
    ) -> EffectResult:
        def apply_then_die(op_id: str) -> Mapping[str, Any] | None:
            apply(op_id)
            raise WorkerDied

        dies = self._only is None or spec.op_id == self._only
        return self._runner.run(spec, apply_then_die if dies else apply, confirm)


def claimed_by_a_dead_attempt(
    runner: EffectRunner, op_id: str, kind: str, target: str, intent: dict[str, Any]
) -> None:
    """The ledger as a worker leaves it that claimed `op_id` and died before recording."""

    def die(_: str) -> None:
        raise WorkerDied

    with pytest.raises(WorkerDied):
        runner.ledger.run_once(
            OperationSpec(op_id=op_id, incident_id="i", kind=kind, target=target, intent=intent),
            die,
        )


def promote_one_spare() -> PromoteWarmInput:
    return PromoteWarmInput(
        op_id="i/promote-warm/llm",
        incident_id="i",
        namespace=NS,
        pool=POOL,
        model=MODEL,
        revision=REV,
        count=1,
    )


def writes_per_object(handle: FleetHandle, op_id: str) -> dict[str, int]:
    """fleetsim's count of accepted writes stamped `op_id`, per object."""
    writes = handle.fleet.kube_server.mutations.summary()["by_op_id_and_object"]
    return {k: n for k, n in writes.items() if k.startswith(f"{op_id} ")}


def test_a_retried_promotion_reports_the_spare_the_dead_attempt_promoted(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=2, warm=1, nodes_per_rack=3)
    op = promote_one_spare()
    with pytest.raises(WorkerDied):
        ActivityEnvironment().run(
            ClusterActivities(kube.api, DiesAfterWriting(runner), settings).promote_warm, op
        )
    written = kube.server.mutations.writes(op.op_id)
    assert written == 1

    retry = ActivityEnvironment().run(
        ClusterActivities(kube.api, runner, settings).promote_warm, op
    )

    assert len(retry.promoted) == 1 and not retry.applied_now
    assert kube.server.mutations.writes(op.op_id) == written
    record = runner.ledger.get(op.op_id)
    assert record is not None and (record.state, record.attempts) == ("confirmed", 2)


def test_a_retried_promotion_whose_dead_attempt_wrote_nothing_promotes_now(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=2, warm=1, nodes_per_rack=3)
    op = promote_one_spare()
    runner.ledger.lease = 0.0  # the dead attempt's claim has run out
    acts = ClusterActivities(kube.api, runner, settings)
    claimed_by_a_dead_attempt(
        runner,
        op.op_id,
        "promote-warm",
        f"{NS}/service/{POOL}",
        {
            "selector": acts._exact_warm_selector(POOL, MODEL, REV),
            "count": 1,
            "mode": "label",
            "weight": None,
        },
    )

    retry = ActivityEnvironment().run(acts.promote_warm, op)

    assert len(retry.promoted) == 1 and retry.applied_now
    assert kube.server.mutations.writes(op.op_id) == 1


def test_a_retried_shed_tier_records_the_dead_attempts_tier_and_the_tier_before_it(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=0))
    gateway = AnnotationGateway(handle.api, ActivitySettings())
    op = ShedTierInput(
        op_id="i/protect/shed-tier",
        incident_id="i",
        namespace=NS,
        pool=POOL,
        pressure=PressureSummary(healthy_replicas=3, max_kv_cache_usage=0.97, lost_fraction=0.25),
        max_level=TIER_MODEL_FALLBACK,
    )
    with pytest.raises(WorkerDied):
        ActivityEnvironment().run(
            GatewayActivities(gateway, DiesAfterWriting(runner)).apply_shed_tier, op
        )
    mutations = handle.fleet.kube_server.mutations
    assert mutations.writes(op.op_id) == 1

    retry = ActivityEnvironment().run(GatewayActivities(gateway, runner).apply_shed_tier, op)

    assert retry.applied.level == TIER_MODEL_FALLBACK and not retry.applied_now
    # What stood before is what the roll-back restores: not the dead attempt's tier.
    assert retry.previous.level == TIER_NONE
    assert mutations.writes(op.op_id) == 1
    record = runner.ledger.get(op.op_id)
    assert record is not None and record.state == "confirmed"


def test_a_retried_ramp_writes_the_step_it_had_planned_and_no_pod_twice(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=8, warm_rate=16))
    new, warm = cold_replacement(handle)
    op = ramp_input(handle, new, warm, steps=2)
    beats: list[dict[str, Any]] = []
    dead = ActivityEnvironment()
    dead.on_heartbeat = lambda *details: beats.append(details[0])
    gateway = AnnotationGateway(handle.api)
    with pytest.raises(WorkerDied):
        dead.run(RampActivities(gateway, handle.http, DiesAfterWriting(runner)).ramp_traffic, op)
    planned = beats[-1]["pending"]
    assert planned is not None and planned["index"] == 1

    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, heartbeat_details=[beats[-1]])
    resumed = retry.run(RampActivities(gateway, handle.http, runner).ramp_traffic, op)

    assert resumed.steps[0].weights == planned["weights"]
    step_one = writes_per_object(handle, "i/ramp/step-1")
    assert len(step_one) == len(planned["weights"]) and set(step_one.values()) == {1}


def test_a_ramp_step_half_written_by_a_dead_attempt_is_finished_with_one_write_per_pod(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=8, warm_rate=16))
    new, warm = cold_replacement(handle)
    pods = sorted(p["metadata"]["name"] for p in [*warm, new])
    op = ramp_input(handle, new, warm, steps=1)
    gateway = AnnotationGateway(handle.api)
    # The dead attempt planned step 1, wrote its first pod, and its heartbeat never left.
    gateway.write_weights(NS, {pods[0]: 77}, "i/ramp/step-1")
    claimed_by_a_dead_attempt(
        runner, "i/ramp/step-1", "router-weights", f"{NS}/pod/{pods[0]}", {"ramp_step": 1}
    )

    result = ActivityEnvironment().run(
        RampActivities(gateway, handle.http, runner).ramp_traffic, op
    )

    step_one = writes_per_object(handle, "i/ramp/step-1")
    assert len(step_one) == len(pods) and set(step_one.values()) == {1}
    # The step is what landed: the dead attempt's weight on its pod, the retry's elsewhere.
    assert result.steps[0].weights[pods[0]] == 77
    record = runner.ledger.get("i/ramp/step-1")
    assert record is not None and (record.state, record.attempts) == ("confirmed", 2)


def test_a_retried_scale_after_only_its_stamp_landed_scales_once_and_undoes_to_the_old_size(
    kube: Kube, runner: EffectRunner, settings: ActivitySettings
) -> None:
    build_pool(kube.cluster, replicas=1, warm=1, nodes_per_rack=2)
    warm = f"{POOL}-warm"
    op = ScaleInput(op_id="i/scale", incident_id="i", namespace=NS, name=warm, replicas=3)
    # The dead attempt stamped the workload (op id, size before) and died before scaling.
    kube.store.patch(
        "deployments",
        warm,
        {"metadata": {"annotations": {OP: op.op_id, "fleetmend.io/previous-replicas": "1"}}},
        namespace=NS,
    )
    claimed_by_a_dead_attempt(runner, op.op_id, "scale", f"{NS}/deployment/{warm}", {"replicas": 3})

    retry = ActivityEnvironment().run(ClusterActivities(kube.api, runner, settings).scale_pool, op)

    assert (retry.previous_replicas, retry.replicas) == (1, 3)
    writes = kube.server.mutations.summary()["by_op_id_and_object"]
    assert f"{op.op_id} deployments/{NS}/{warm}" not in writes  # the stamp is not written again
    assert kube.store.get("deployments", warm, namespace=NS)["spec"]["replicas"] == 3
