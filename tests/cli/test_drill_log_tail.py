"""A child that exits while a drill starts is reported with the end of its log."""

from __future__ import annotations

from pathlib import Path

from worker.drill import log_tail


def test_the_error_carries_the_last_words_of_the_log(tmp_path: Path) -> None:
    log = tmp_path / "intake.log"
    log.write_text("starting\n" * 500 + "OSError: [Errno 98] address already in use\n")

    tail = log_tail(log, limit=200)

    assert tail.endswith("address already in use\n")
    assert len(tail) == 200


def test_a_missing_log_is_said_to_be_unreadable(tmp_path: Path) -> None:
    assert log_tail(tmp_path / "gone.log").startswith("(unreadable:")
