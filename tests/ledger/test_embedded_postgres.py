"""The embedded server the demo and `fleetmend up` use: URLs, and a data dir reused across runs."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sqlalchemy import create_engine, text

from worker.postgres import libpq_uri, psycopg_url, start_embedded


def test_the_embedded_servers_socket_uri_becomes_a_psycopg_url_for_any_database() -> None:
    uri = "postgresql://postgres:@/postgres?host=/var/lib/fleetmend/pgdata"

    url = psycopg_url(uri, "fleetmend")

    assert url == "postgresql+psycopg://postgres@/fleetmend?host=%2Fvar%2Flib%2Ffleetmend%2Fpgdata"
    assert (
        libpq_uri(url) == "postgresql://postgres@/fleetmend?host=%2Fvar%2Flib%2Ffleetmend%2Fpgdata"
    )
    assert (
        psycopg_url("postgresql://u:p%40ss@db:5433/x") == "postgresql+psycopg://u:p%40ss@db:5433/x"
    )


def test_a_persistent_data_dir_keeps_its_data_across_a_restart() -> None:
    # Outside pytest's basetemp, which other pytest sessions chmod 0700 (see fixtures).
    parent = Path(tempfile.mkdtemp(prefix="fleetmend-pg-"))
    try:
        first = start_embedded(parent / "pgdata")
        engine = create_engine(first.url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE kept (note text)"))
            conn.execute(text("INSERT INTO kept VALUES ('still here')"))
        engine.dispose()
        first.stop()

        second = start_embedded(parent / "pgdata")
        engine = create_engine(second.url)
        with engine.connect() as conn:
            note = conn.execute(text("SELECT note FROM kept")).scalar_one()
            database = conn.execute(text("SELECT current_database()")).scalar_one()
        engine.dispose()
        second.stop()
    finally:
        shutil.rmtree(parent, ignore_errors=True)

    assert (note, database) == ("still here", "fleetmend")
