"""Settings: documented defaults, and a bad value stops start-up naming the variable."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from worker.cli import app
from worker.settings import Settings, SettingsError, describe_settings, load_settings


def test_every_setting_has_a_default_and_a_description() -> None:
    for name, field in Settings.model_fields.items():
        assert not field.is_required(), f"{name} has no default"
        assert field.description, f"{name} is undocumented"
    assert len(describe_settings()) == len(Settings.model_fields)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("FLEETMEND_BLAST_RADIUS_FRACTION", "1.5", "less than or equal to 1"),
        ("FLEETMEND_BLAST_RADIUS_FRACTION", "lots", "valid number"),
        ("FLEETMEND_AUTO_SHED_TIER_LIMIT", "9", "less than or equal to 4"),
        ("FLEETMEND_TEMPORAL_ADDRESS", "localhost", "host:port"),
        ("FLEETMEND_INTAKE_PORT", "70000", "less than or equal to 65535"),
        ("FLEETMEND_DATABASE_URL", "sqlite:///x.db", "PostgreSQL only"),
        ("FLEETMEND_LOG_LEVEL", "LOUD", "DEBUG"),
    ],
)
def test_a_bad_value_fails_with_a_message_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert variable in str(err.value)
    assert says in str(err.value)


def test_a_secret_never_appears_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMEND_INTAKE_BASIC_PASSWORD", "hunter2-secret")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "FLEETMEND_INTAKE_BASIC_USER" in str(err.value)
    assert "hunter2-secret" not in str(err.value)


def test_a_database_password_never_appears_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMEND_DATABASE_URL", "mysql://fleet:hunter2-secret@db:3306/x?k=v")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "FLEETMEND_DATABASE_URL" in str(err.value) and "mysql://db:3306/x" in str(err.value)
    assert "hunter2-secret" not in str(err.value)


def test_a_plain_postgresql_url_is_driven_through_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMEND_DATABASE_URL", "postgresql://u:p@db:5432/fleetmend")
    assert load_settings().database_url == "postgresql+psycopg://u:p@db:5432/fleetmend"


def test_the_cli_stops_on_a_bad_setting_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETMEND_GATE_TIMEOUT_S", "-1")
    monkeypatch.setenv("FLEETMEND_DATABASE_URL", "postgresql+psycopg://u@h/db")
    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 1
    assert "FLEETMEND_GATE_TIMEOUT_S" in result.output
    assert "Traceback" not in result.output


def test_settings_survive_the_trip_to_a_child_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.settings import settings_env

    original = load_settings(
        intake_token="tok", blast_radius_fraction=0.5, dry_run=True, kubeconfig="/tmp/kc"
    )
    for name, value in settings_env(original).items():
        monkeypatch.setenv(name, value)
    assert load_settings() == original
