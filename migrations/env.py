"""Alembic environment for the ledger (PostgreSQL only).

Run through `ledger.migrate.upgrade(url)` (the CLI's `fleetmend db upgrade`, the stack and
the test fixtures), or `alembic upgrade head` from the repository root with
FLEETMEND_DATABASE_URL set. A transaction-level advisory lock serialises concurrent
upgrades, so a worker and an intake starting together do not race on the same DDL.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool, text

from ledger.models import Base

MIGRATION_LOCK = 0x6C6564676572  # "ledger": one advisory lock key for all migrations

config = context.config
target_metadata = Base.metadata


def _database_url() -> str:
    url = (
        config.attributes.get("database_url")
        or os.environ.get("FLEETMEND_DATABASE_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise RuntimeError("no database URL: set FLEETMEND_DATABASE_URL or sqlalchemy.url")
    return str(url)


def run_migrations_offline() -> None:
    context.configure(
        url=_database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_database_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection, target_metadata=target_metadata, compare_type=True
            )
            with context.begin_transaction():
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK}
                )
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
