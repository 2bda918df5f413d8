"""A drill's stack starts on ports no client connection takes, and a child that exits
while it starts is reported with the end of its log."""

from __future__ import annotations

import socket
from pathlib import Path

from worker.drill import _ephemeral_start, _free_port, log_tail


def test_the_error_carries_the_last_words_of_the_log(tmp_path: Path) -> None:
    log = tmp_path / "intake.log"
    log.write_text("starting\n" * 500 + "OSError: [Errno 98] address already in use\n")

    tail = log_tail(log, limit=200)

    assert tail.endswith("address already in use\n")
    assert len(tail) == 200


def test_a_missing_log_is_said_to_be_unreadable(tmp_path: Path) -> None:
    assert log_tail(tmp_path / "gone.log").startswith("(unreadable:")


def test_a_drills_free_ports_lie_below_the_ephemeral_range() -> None:
    ports = {_free_port() for _ in range(20)}
    assert all(20000 <= p < _ephemeral_start() for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # still free
