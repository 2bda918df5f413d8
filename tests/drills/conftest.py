"""A drill's state directory, outside pytest's basetemp.

Every new pytest session (ours or a neighbour's) resets /tmp/pytest-of-<user> to 0700,
which locks the embedded PostgreSQL's own system user out of a data dir under it when the
tests run as root (the same reason as `tests/fixtures/postgres.py`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def drill_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fleetmend-drill-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
