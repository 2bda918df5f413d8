"""Triage: the fault table, DCGM evidence, and quarantine only once out of the serving path."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities, DerouteInput
from activities.config import ActivitySettings
from activities.effects import EffectRunner
from activities.metrics import parse_metrics
from activities.triage import (
    Fault,
    TriageActivities,
    TriageInput,
    classify_fault,
    classify_node,
    faults_from_dcgm,
)
from fleetsim.dcgm import NodeGpus

from .conftest import NS, POOL, FleetHandle, scenario


@pytest.mark.parametrize(
    ("xid", "disposition"),
    [
        (48, "replace-gpu"),
        (79, "reboot-node"),
        (13, "restart-process"),
        (31, "restart-process"),
        (43, "restart-process"),
        (63, "capacity-loss"),
        (64, "replace-gpu"),
        (94, "restart-process"),
        (95, "reboot-node"),
        (74, "drain"),
        (92, "drain"),
        (119, "reboot-node"),
        (120, "reboot-node"),
        (4242, "drain"),  # unknown: out of the pool until a human looks
    ],
)
def test_each_xid_maps_to_one_disposition_in_the_gpu_fault_runbook(
    xid: int, disposition: str
) -> None:
    c = classify_fault(Fault(fault_class="xid", xid=xid))
    assert c.disposition == disposition
    assert c.runbook == "gpu-fault"
    assert str(xid) in c.reason


@pytest.mark.parametrize(
    ("fault", "disposition", "runbook"),
    [
        (Fault(fault_class="ecc", detail="uncorrectable 2 (volatile)"), "replace-gpu", "gpu-fault"),
        (Fault(fault_class="ecc", detail="correctable rate high"), "drain", "gpu-fault"),
        (Fault(fault_class="thermal", detail="91 C >= 85 C"), "drain", "thermal-emergency"),
        (
            Fault(fault_class="driver", detail="nvidia module failed to load"),
            "reboot-node",
            "driver-module-load-failure",
        ),
    ],
)
def test_ecc_thermal_and_driver_faults_route_to_their_runbooks(
    fault: Fault, disposition: str, runbook: str
) -> None:
    c = classify_fault(fault)
    assert (c.disposition, c.runbook) == (disposition, runbook)


def test_the_worst_fault_on_a_node_decides_and_a_clean_node_still_drains() -> None:
    worst, per_fault = classify_node(
        [Fault(fault_class="xid", xid=13), Fault(fault_class="xid", xid=48)]
    )
    assert worst.disposition == "replace-gpu" and len(per_fault) == 2
    clean, _ = classify_node([])
    assert clean.disposition == "drain" and "qualify" in clean.reason


def test_dcgm_evidence_counts_an_ecc_xid_once_and_reads_temperature() -> None:
    gpus = NodeGpus.create("gpu-0", 2, "H100")
    gpus.record_xid(1, 48)
    gpus.gpus[0].temp_c = 90.0

    faults, evidence = faults_from_dcgm(parse_metrics(gpus.exposition()))

    assert sorted((f.fault_class, f.gpu) for f in faults) == [("thermal", "0"), ("xid", "1")]
    assert evidence["xid.gpu1"] == 48 and evidence["ecc_dbe_volatile.gpu1"] == 1
    assert evidence["temp_c.gpu0"] == 90.0


def test_triage_refuses_while_the_node_serves_then_cordons_and_labels_it(
    fleet_factory: Callable[..., FleetHandle], runner: EffectRunner
) -> None:
    handle = fleet_factory(scenario(rate=2))
    injected = handle.call(
        handle.fleet.inject,
        {
            "at": 0,
            "kind": "gpu-xid",
            "xid": 79,
            "target": {"namespace": NS, "pool": POOL, "replica": 0},
        },
    )
    (node,) = injected.nodes
    (pod_ref,) = injected.pods
    pod = pod_ref.split("/")[-1]
    settings = ActivitySettings(poll_interval_s=0.05)
    cluster = ClusterActivities(handle.api, runner, settings)
    triage = TriageActivities(cluster, handle.http)
    env = ActivityEnvironment()
    op = TriageInput(op_id=f"i/triage/{node}", incident_id="i", node=node, serving_namespaces=[NS])

    with pytest.raises(ApplicationError) as refused:
        env.run(triage.triage_node, op)
    assert refused.value.non_retryable and "serving path" in str(refused.value)
    assert not handle.store.get("nodes", node)["spec"].get("unschedulable")

    env.run(
        cluster.deroute_replica,
        DerouteInput(
            op_id=f"i/deroute/{pod}", incident_id="i", namespace=NS, service=POOL, pod=pod
        ),
    )
    result = env.run(triage.triage_node, op)

    assert result.disposition == "reboot-node" and result.runbook == "gpu-fault"
    assert [f.xid for f in result.faults] == [79]
    assert 79 in result.evidence.values()
    assert result.dcgm_error is None
    assert result.cordoned and result.qualified_label == "false"
    stored = handle.store.get("nodes", node)
    assert stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["labels"]["fleetmend.io/qualified"] == "false"
