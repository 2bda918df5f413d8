"""Apply the ledger's Alembic migrations programmatically.

Called from `fleetmend db upgrade`, `worker.stack` and the test fixtures. The scripts are
found through the installed `migrations` package, never through the working directory,
so this works from a wheel as well as from a checkout.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

import migrations


def alembic_config(database_url: str) -> Config:
    """An Alembic Config pointing at the packaged scripts and the given database."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).resolve().parent))
    # Passed as an attribute, not as sqlalchemy.url: ConfigParser would treat '%' in a
    # password as interpolation.
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the ledger schema at `database_url` up to `revision` (default: the newest)."""
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def head_revision() -> str:
    """The newest revision the packaged scripts define."""
    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    assert head is not None, "migrations/versions holds no revision"
    return head
