"""deploy/*.yaml: valid against the Kubernetes schemas, and consistent with the code.

The schemas ship inside the `kubernetes-validate` wheel (no download at test time); strict
mode refuses unknown fields, so a typo in a field name fails here and not at apply time.
The other tests read the manifests as data: selectors match pod labels, probes hit the
endpoints the processes really serve, secrets are referenced and never inlined, and the
worker's drain fits in its termination grace period.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from worker.intake import IntakeOptions
from worker.intake_openapi import openapi_document
from worker.main import WorkerOptions
from worker.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NOT_KUBERNETES = {"alertmanager.yml", "alert-rules.yaml"}
KUBERNETES_VERSION = "1.32.0"  # the kubectl on the image; the oldest cluster we document


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.glob("*.y*ml") if p.name not in NOT_KUBERNETES)


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    for _, doc in documents():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind}/{name} in deploy/")


def container(deployment: str) -> dict[str, Any]:
    return find("Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]


def env(deployment: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(deployment).get("env", [])}


def test_the_manifests_cover_worker_and_intake_with_every_kind_the_issue_asks_for() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in documents()}
    for name in ("fleetmend-worker", "fleetmend-intake"):
        for kind in ("Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"):
            assert (kind, name) in kinds


@pytest.mark.parametrize(("label", "doc"), documents(), ids=[label for label, _ in documents()])
def test_each_manifest_is_valid_against_the_kubernetes_schema_in_strict_mode(
    label: str, doc: dict[str, Any]
) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_does_reject_a_misspelled_field() -> None:
    # Proves the strict check above can fail: a typo is not silently accepted.
    broken = find("Deployment", "fleetmend-intake")
    broken = yaml.safe_load(yaml.safe_dump(broken))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", ["fleetmend-worker", "fleetmend-intake"])
def test_services_pdbs_and_network_policies_select_the_deployments_pods(name: str) -> None:
    pod_labels = find("Deployment", name)["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict[str, str]) -> bool:
        return all(pod_labels.get(k) == v for k, v in selector.items())

    assert selects(find("Service", name)["spec"]["selector"])
    assert selects(find("PodDisruptionBudget", name)["spec"]["selector"]["matchLabels"])
    assert selects(find("NetworkPolicy", name)["spec"]["podSelector"]["matchLabels"])
    assert selects(find("Deployment", name)["spec"]["selector"]["matchLabels"])


def test_the_intake_probes_check_temporal_readiness_on_the_served_port() -> None:
    intake = container("fleetmend-intake")
    served = set(openapi_document()["paths"])
    # /readyz needs the token, so the readiness probe runs in the container with its env.
    assert intake["readinessProbe"]["exec"]["command"][-2:] == ["worker.intake_probe", "/readyz"]
    assert intake["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"/readyz", "/healthz"} <= served
    port = env("fleetmend-intake")["FLEETMEND_INTAKE_PORT"]["value"]
    assert intake["ports"][0]["containerPort"] == int(port)
    # The readiness timeout outlasts the intake's own Temporal deadline, so a slow but
    # reachable Temporal is not mistaken for a dead one.
    assert intake["readinessProbe"]["timeoutSeconds"] > IntakeOptions().temporal_timeout_s


def test_the_worker_probes_hit_its_health_server() -> None:
    worker = container("fleetmend-worker")
    ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    health_port = int(env("fleetmend-worker")["FLEETMEND_WORKER_HEALTH_PORT"]["value"])
    assert ports["health"] == health_port
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    metrics = env("fleetmend-worker")["FLEETMEND_WORKER_METRICS_ADDRESS"]["value"]
    assert ports["metrics"] == int(metrics.rsplit(":", 1)[1])


def test_the_worker_drain_fits_in_its_termination_grace_period() -> None:
    spec = find("Deployment", "fleetmend-worker")["spec"]["template"]["spec"]
    drain = float(env("fleetmend-worker")["FLEETMEND_WORKER_GRACEFUL_SHUTDOWN_S"]["value"])
    assert WorkerOptions(graceful_shutdown_s=drain).graceful_shutdown_s == drain
    assert spec["terminationGracePeriodSeconds"] > drain


def test_the_worker_uses_the_rbac_service_account_and_the_intake_has_no_api_token() -> None:
    worker = find("Deployment", "fleetmend-worker")["spec"]["template"]["spec"]
    intake = find("Deployment", "fleetmend-intake")["spec"]["template"]["spec"]
    assert (
        worker["serviceAccountName"]
        == find("ServiceAccount", "fleetmend-worker")["metadata"]["name"]
    )
    assert intake["automountServiceAccountToken"] is False


@pytest.mark.parametrize("name", ["fleetmend-worker", "fleetmend-intake"])
def test_secrets_are_referenced_never_inlined(name: str) -> None:
    for var, entry in env(name).items():
        secret_like = any(word in var for word in ("TOKEN", "PASSWORD", "DATABASE_URL", "WEBHOOK"))
        if secret_like:
            assert "value" not in entry, f"{var} is inlined in {name}"
            assert "secretKeyRef" in entry["valueFrom"], var
    for _, doc in documents():
        assert doc["kind"] != "Secret", "deploy/ ships Secret references, never Secrets"


def test_the_intake_token_comes_from_the_secret_alertmanager_mounts() -> None:
    token = env("fleetmend-intake")["FLEETMEND_INTAKE_TOKEN"]["valueFrom"]["secretKeyRef"]
    config = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    receiver = next(r for r in config["receivers"] if r["name"] == "fleetmend")
    webhook = receiver["webhook_configs"][0]
    credentials_file = webhook["http_config"]["authorization"]["credentials_file"]
    assert credentials_file.endswith(f"/{token['name']}/{token['key']}")
    assert ":8787/" in webhook["url"]
    assert "fleetmend-intake.fleetmend.svc" in webhook["url"]


@pytest.mark.parametrize("name", ["fleetmend-worker", "fleetmend-intake"])
def test_pods_run_unprivileged(name: str) -> None:
    pod = find("Deployment", name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = container(name)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]


def test_every_configmap_key_is_a_real_setting() -> None:
    data = find("ConfigMap", "fleetmend-config")["data"]
    known = {f"FLEETMEND_{name.upper()}" for name in Settings.model_fields}
    assert set(data) <= known, set(data) - known
    Settings(**{k.removeprefix("FLEETMEND_").lower(): v for k, v in data.items()})
