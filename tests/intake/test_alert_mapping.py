"""The label mapping: which labels name the replica, and which alerts are rejected, and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.intake.conftest import alert
from worker.alerts import (
    AlertmanagerWebhook,
    AlertRejected,
    LabelMapping,
    MappedFiring,
    MappedResolved,
    derive_fault,
    map_alert,
)


def mapped_firing(raw: dict[str, object], mapping: LabelMapping | None = None) -> MappedFiring:
    result = map_alert(0, raw, mapping or LabelMapping())
    assert isinstance(result, MappedFiring), result
    return result


def test_the_default_labels_name_namespace_pool_pod_node_and_fault() -> None:
    lost = mapped_firing(
        alert(namespace="llm", pool="llama-70b", pod="llama-70b-3", node="gpu-7", fault="gpu-xid")
    ).lost
    assert (lost.namespace, lost.pool, lost.pod, lost.node, lost.fault) == (
        "llm",
        "llama-70b",
        "llama-70b-3",
        "gpu-7",
        "gpu-xid",
    )


@pytest.mark.parametrize("label", ["service", "deployment", "leaderworkerset"])
def test_the_pool_falls_back_to_service_deployment_and_leaderworkerset(label: str) -> None:
    lost = mapped_firing(alert(namespace="llm", **{label: "mixtral"})).lost
    assert lost.pool == "mixtral"


def test_the_pool_label_wins_over_its_fallbacks() -> None:
    assert mapped_firing(alert(namespace="llm", pool="a", service="b")).lost.pool == "a"


def test_the_node_comes_from_instance_without_its_port() -> None:
    assert mapped_firing(alert(namespace="llm", pool="p", instance="gpu-3:9400")).lost.node == (
        "gpu-3"
    )


@pytest.mark.parametrize(
    ("alertname", "fault"),
    [
        ("KubeNodeNotReady", "node-not-ready"),
        ("FleetmendPodNotReady", "pod-not-ready"),
        ("KubePodCrashLooping", "pod-crashloop"),
        ("GPUXidError", "gpu-xid"),
        ("DCGM_ECC_DBE_Volatile", "gpu-ecc"),
        ("ServingEndpointsDropped", "endpoint-dropped"),
        ("ReplicaNoTraffic", "no-traffic"),
        ("PodOOMKilled", "pod-oom-killed"),
        ("SomethingElse", "unknown"),
    ],
)
def test_without_a_fault_label_the_fault_is_derived_from_the_alertname(
    alertname: str, fault: str
) -> None:
    assert derive_fault(alertname, LabelMapping().fault_by_alertname) == fault


def test_a_firing_alert_without_namespace_is_rejected_naming_the_label() -> None:
    result = map_alert(3, alert(pool="p"), LabelMapping())
    assert isinstance(result, AlertRejected)
    assert (result.field, result.reason) == ("alerts.3.labels.namespace", "missing_namespace")


def test_a_firing_alert_without_any_pool_label_is_rejected_naming_the_pool_label() -> None:
    result = map_alert(0, alert(namespace="llm"), LabelMapping())
    assert isinstance(result, AlertRejected)
    assert (result.field, result.reason) == ("alerts.0.labels.pool", "missing_pool")


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({"namespace": "LLM", "pool": "p"}, "namespace"),
        ({"namespace": "llm", "pool": "p/q"}, "pool"),
        ({"namespace": "llm", "pool": "p", "pod": "x y"}, "pod"),
        ({"namespace": "llm", "pool": "p", "node": "a_b"}, "node"),
        ({"namespace": "llm", "pool": "p", "fault": "meteor"}, "fault"),
    ],
)
def test_label_values_that_are_not_kubernetes_names_are_rejected(
    labels: dict[str, str], field: str
) -> None:
    result = map_alert(0, alert(**labels), LabelMapping())
    assert isinstance(result, AlertRejected)
    assert result.field == f"alerts.0.labels.{field}"


def test_a_structurally_bad_alert_is_rejected_with_its_json_path() -> None:
    raw = alert(namespace="llm", pool="p")
    raw["startsAt"] = "yesterday"
    result = map_alert(5, raw, LabelMapping())
    assert isinstance(result, AlertRejected)
    assert (result.field, result.reason) == ("alerts.5.startsAt", "invalid")


def test_a_resolved_alert_maps_to_a_resolution_not_a_loss() -> None:
    result = map_alert(0, alert(status="resolved", namespace="llm", pool="p"), LabelMapping())
    assert isinstance(result, MappedResolved)
    assert result.resolved.ends_at is not None


def test_the_dry_run_label_makes_the_incident_a_dry_run() -> None:
    assert mapped_firing(alert(namespace="l", pool="p", fleetmend_dry_run="true")).lost.dry_run
    assert not mapped_firing(alert(namespace="l", pool="p", fleetmend_dry_run="no")).lost.dry_run


def test_the_dedupe_key_is_the_fingerprint_and_start_time_so_resends_share_it() -> None:
    first = mapped_firing(alert(namespace="l", pool="p", fingerprint="f1"))
    resend = mapped_firing(alert(namespace="l", pool="p", fingerprint="f1"))
    later = mapped_firing(
        alert(namespace="l", pool="p", fingerprint="f1", starts_at="2026-11-29T09:00:00Z")
    )
    assert first.dedupe_key == resend.dedupe_key == "f1@2026-11-29T08:00:00+00:00"
    assert later.dedupe_key != first.dedupe_key


def test_without_a_fingerprint_the_labels_give_a_stable_one() -> None:
    a = mapped_firing(alert(namespace="l", pool="p", pod="x"))
    b = mapped_firing(alert(pod="x", pool="p", namespace="l"))
    assert a.lost.fingerprint == b.lost.fingerprint != ""


def test_the_mapping_is_configurable_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMEND_INTAKE_MAP_POOL", '["model_pool"]')
    mapping = LabelMapping.load()
    assert mapped_firing(alert(namespace="l", model_pool="q"), mapping).lost.pool == "q"
    assert isinstance(map_alert(0, alert(namespace="l", pool="q"), mapping), AlertRejected)


def test_the_mapping_is_configurable_by_a_yaml_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mapping.yaml"
    path.write_text("namespace: [kube_namespace]\nfault_by_alertname: [[meltdown, gpu-ecc]]\n")
    monkeypatch.setenv("FLEETMEND_INTAKE_MAP_FILE", str(path))
    mapping = LabelMapping.load()
    lost = mapped_firing(alert(kube_namespace="l", pool="p", alertname="GPUMeltdown"), mapping)
    assert (lost.lost.namespace, lost.lost.fault) == ("l", "gpu-ecc")


def test_unknown_payload_keys_of_newer_alertmanagers_are_ignored() -> None:
    payload = {
        "version": "4",
        "groupKey": "g",
        "status": "firing",
        "receiver": "r",
        "routeLabels": {"team": "serving"},
        "notification_reason": "repeat",
        "alerts": [{**alert(namespace="l", pool="p"), "someFutureField": 1}],
    }
    parsed = AlertmanagerWebhook.model_validate(payload)
    assert parsed.alerts[0].labels["pool"] == "p"


def test_the_incident_input_carries_the_limits_and_a_drill_scales_only_the_waits() -> None:
    from worker.intake import incident_input
    from worker.settings import load_settings
    from workflows.types import LostReplica

    lost = LostReplica(namespace="serving", pool="llm", pod="llm-0")
    production = incident_input(load_settings(blast_radius_fraction=0.5), lost)
    drill = incident_input(load_settings(blast_radius_fraction=0.5, time_scale=10), lost)
    assert production.blast_radius_fraction == drill.blast_radius_fraction == 0.5
    assert production.ramp_step_interval_s == 60.0 and drill.ramp_step_interval_s == 6.0
    assert production.gate_timeout_s == 900.0 and drill.gate_timeout_s == 90.0
    assert drill.cooldown_s == production.cooldown_s / 10
    assert drill.probe_share == production.probe_share
