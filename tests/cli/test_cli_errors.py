"""Every failure of the `fleetmend` command is one clear line and a non-zero exit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but never listening: connects are refused, and nobody else can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def fleetmend(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEETMEND_")}
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line_error(run: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert run.returncode == code, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("fleetmend: ")
    assert text in lines[0]


def test_a_bad_setting_names_the_variable() -> None:
    run = fleetmend("status", FLEETMEND_TEMPORAL_ADDRESS="no-port")
    assert_one_line_error(run, 1, "FLEETMEND_TEMPORAL_ADDRESS")


def test_status_with_temporal_down_says_where_it_looked(closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    run = fleetmend("status", FLEETMEND_TEMPORAL_ADDRESS=address)
    assert_one_line_error(run, 1, f"cannot reach Temporal at {address}")


def test_approve_with_temporal_down_is_one_line(closed_port: int) -> None:
    run = fleetmend(
        "approve",
        "llm/pool",
        "gate",
        "--by",
        "alice",
        FLEETMEND_TEMPORAL_ADDRESS=f"127.0.0.1:{closed_port}",
    )
    assert_one_line_error(run, 1, "cannot reach Temporal")


def test_approve_requires_a_name() -> None:
    run = fleetmend("approve", "llm/pool", "gate", "--by", "  ")
    assert_one_line_error(run, 1, "--by must name you")


def test_intake_without_a_token_refuses_to_start(closed_port: int) -> None:
    run = fleetmend("intake", FLEETMEND_INTAKE_PORT=str(closed_port))
    assert_one_line_error(run, 1, "FLEETMEND_INTAKE_TOKEN")


def test_intake_with_a_bad_mapping_variable_names_it() -> None:
    run = fleetmend(
        "intake", FLEETMEND_INTAKE_TOKEN="t", FLEETMEND_INTAKE_TEMPORAL_TIMEOUT_S="soon"
    )
    assert_one_line_error(run, 1, "FLEETMEND_INTAKE_TEMPORAL_TIMEOUT_S")


def test_worker_without_a_database_says_so() -> None:
    run = fleetmend("worker")
    assert_one_line_error(run, 1, "FLEETMEND_DATABASE_URL is not set")


def test_db_upgrade_without_a_database_url_says_so() -> None:
    run = fleetmend("db", "upgrade")
    assert_one_line_error(run, 1, "FLEETMEND_DATABASE_URL is not set")


@pytest.mark.parametrize("args", [["--help"], ["status", "--help"], ["approve", "--help"]])
def test_help_works_without_any_service(args: list[str]) -> None:
    run = fleetmend(*args)
    assert run.returncode == 0
    assert "Usage" in run.stdout


def test_intake_with_a_bad_mapping_variable_names_that_variable() -> None:
    run = fleetmend("intake", FLEETMEND_INTAKE_TOKEN="t", FLEETMEND_INTAKE_MAP_POOL="not json")
    assert_one_line_error(run, 1, "FLEETMEND_INTAKE_MAP_POOL")


def test_intake_with_a_broken_mapping_file_names_the_file(tmp_path: Path) -> None:
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("pool: [unclosed\n")
    run = fleetmend("intake", FLEETMEND_INTAKE_TOKEN="t", FLEETMEND_INTAKE_MAP_FILE=str(mapping))
    assert_one_line_error(run, 1, f"bad label mapping: {mapping}")


def test_intake_with_a_mapping_file_naming_an_unknown_fault_names_the_key(tmp_path: Path) -> None:
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("fault_by_alertname: [[meltdown, meteor]]\n")
    run = fleetmend("intake", FLEETMEND_INTAKE_TOKEN="t", FLEETMEND_INTAKE_MAP_FILE=str(mapping))
    assert_one_line_error(run, 1, "fault_by_alertname")
