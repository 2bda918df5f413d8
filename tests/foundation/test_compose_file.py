"""docker-compose.yml is consistent with the code, checked without a Docker daemon.

No Docker engine runs on the build machines, so the compose file cannot be started here;
these tests catch the mistakes that would make `docker compose up` fail or misbehave: a
renamed setting, a command the CLI does not have, a port that does not line up.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from typer.main import get_command

from worker.cli import app
from worker.settings import ENV_PREFIX, Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
FLEETMEND_SERVICES = [name for name, svc in SERVICES.items() if svc.get("build")]


def _env(service: str) -> dict[str, str]:
    env = SERVICES[service].get("environment", {})
    assert isinstance(env, dict), f"{service}: use the mapping form for environment"
    return {k: str(v) for k, v in env.items()}


def _interpolated(value: str) -> str:
    """Replace ${VAR:-default} / ${VAR:?msg} the way compose would with the variable unset."""
    return re.sub(
        r"\$\{[A-Z_]+(?::-([^}]*)|:\?[^}]*)?\}", lambda m: m.group(1) or "set-by-operator", value
    )


def _container_ports(service: str) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in SERVICES[service].get("ports", [])}


def test_every_service_has_an_image_or_a_build_from_this_repository() -> None:
    for name, svc in SERVICES.items():
        assert svc.get("image") or svc.get("build"), f"{name} has neither image nor build"
    assert {"worker", "intake", "migrate"} <= set(FLEETMEND_SERVICES)
    assert (ROOT / "Dockerfile").exists()


def test_fleetmend_services_run_commands_the_cli_has() -> None:
    cli = get_command(app)
    commands = set(cli.commands)  # type: ignore[attr-defined]
    for name in FLEETMEND_SERVICES:
        command = SERVICES[name]["command"]
        assert command[0] in commands, f"{name}: `fleetmend {command[0]}` does not exist"
        if command[0] == "db":
            assert command[1] in cli.commands["db"].commands  # type: ignore[attr-defined]


@pytest.mark.parametrize("service", FLEETMEND_SERVICES)
def test_environment_names_are_settings_and_their_values_load(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = {f"{ENV_PREFIX}{field.upper()}" for field in Settings.model_fields}
    env = _env(service)
    for name, value in env.items():
        assert name in known, f"{service}: {name} is not a fleetmend setting"
        monkeypatch.setenv(name, _interpolated(value))
    settings = load_settings()
    assert settings.database_url is not None


@pytest.mark.parametrize("service", FLEETMEND_SERVICES)
def test_addresses_point_at_services_and_ports_that_exist(service: str) -> None:
    env = {k: _interpolated(v) for k, v in _env(service).items()}
    host, _, port = env["FLEETMEND_TEMPORAL_ADDRESS"].rpartition(":")
    assert host in SERVICES and int(port) in _container_ports(host)

    db = urlsplit(env["FLEETMEND_DATABASE_URL"])
    assert db.hostname in SERVICES
    pg_env = _env(db.hostname)
    assert db.username == pg_env["POSTGRES_USER"] and db.password == pg_env["POSTGRES_PASSWORD"]
    assert db.path.lstrip("/") == pg_env["POSTGRES_DB"]


def test_the_intake_listens_on_the_port_it_publishes() -> None:
    env = _env("intake")
    assert env["FLEETMEND_INTAKE_HOST"] == "0.0.0.0"
    assert int(env["FLEETMEND_INTAKE_PORT"]) in _container_ports("intake")


def test_the_web_ui_and_temporal_agree_on_the_frontend_address() -> None:
    ui_target = _env("temporal-ui")["TEMPORAL_ADDRESS"]
    host, _, port = ui_target.rpartition(":")
    assert host == "temporal" and int(port) in _container_ports("temporal")
    assert "8233" in {str(p).split(":")[0] for p in SERVICES["temporal-ui"]["ports"]}


def test_the_image_contains_every_package_the_distribution_ships() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("workflows", "activities", "ledger", "migrations", "worker", "fleetsim"):
        assert re.search(rf"^COPY {package} ", dockerfile, re.M), f"Dockerfile misses {package}/"
    assert 'ENTRYPOINT ["fleetmend"]' in dockerfile
