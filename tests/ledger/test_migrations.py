"""The schema comes from Alembic, matches the models, and migrates from any directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect, text

from ledger.migrate import downgrade, head_revision, upgrade
from ledger.models import Base


def test_the_migrated_schema_matches_the_models(db_engine: Engine) -> None:
    with db_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)

    assert differences == []


def test_the_test_database_is_at_the_head_revision(db_engine: Engine) -> None:
    with db_engine.connect() as conn:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()

    assert version == head_revision()


def test_upgrade_finds_its_scripts_from_any_working_directory(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    downgrade(database_url, "base")
    engine = create_engine(database_url)
    try:
        assert "operations" not in inspect(engine).get_table_names()

        upgrade(database_url)
        upgrade(database_url)  # a second upgrade is a no-op

        assert {"incidents", "operations", "reconciliation_runs"} <= set(
            inspect(engine).get_table_names()
        )
    finally:
        engine.dispose()
    assert os.getcwd() == str(tmp_path)
