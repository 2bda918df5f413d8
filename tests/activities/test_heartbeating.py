"""A blocking call longer than a heartbeat timeout keeps its activity heartbeating."""

from __future__ import annotations

import threading
import time

import pytest
from temporalio.testing import ActivityEnvironment

from activities.common import heartbeating


def test_a_long_call_heartbeats_while_it_runs_and_returns_its_value() -> None:
    env = ActivityEnvironment()
    beats: list[tuple[object, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    def slow() -> str:
        time.sleep(0.35)
        return "answer"

    assert env.run(lambda: heartbeating(slow, every_s=0.05)) == "answer"
    assert len(beats) >= 3


def test_the_calls_error_reaches_the_activity() -> None:
    def broken() -> None:
        raise ValueError("the replica answered 500")

    with pytest.raises(ValueError, match="answered 500"):
        ActivityEnvironment().run(lambda: heartbeating(broken, every_s=0.05))


def test_outside_an_activity_the_call_runs_inline() -> None:
    caller = threading.current_thread()

    assert heartbeating(lambda: threading.current_thread() is caller) is True
