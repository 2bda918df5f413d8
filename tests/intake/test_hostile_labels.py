"""Hostile label values: refused naming the label where they would name Kubernetes objects,
carried verbatim where they are only text, and never able to forge a log line.
"""

from __future__ import annotations

import io
import logging

import pytest

from tests.intake.conftest import Intake, alert, notification
from tests.intake.hostile import HOSTILE
from worker.alerts import AlertRejected, LabelMapping, MappedFiring, map_alert
from worker.logsafe import EscapingFormatter, configure_logging, escape_controls

NAMED = ["namespace", "pool", "pod", "node", "fault"]
# Pod and node names may be DNS subdomains of up to 253 characters.
VALID_NAMES = {("long but a name", "pod"), ("long but a name", "node")}


@pytest.mark.parametrize("label", NAMED)
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_value_in_a_label_that_names_an_object_is_refused_naming_it(
    label: str, kind: str
) -> None:
    labels = {"namespace": "llm", "pool": "p", label: HOSTILE[kind]}
    result = map_alert(0, alert(**labels), LabelMapping())
    if (kind, label) in VALID_NAMES:
        assert isinstance(result, MappedFiring)
        return
    assert isinstance(result, AlertRejected), (label, kind)
    field = "labels" if kind == "very long" else f"labels.{label}"
    assert result.field == f"alerts.0.{field}"
    assert result.reason != "invalid" or kind == "nul"


@pytest.mark.parametrize("kind", sorted(set(HOSTILE) - {"very long"}))  # over 64 KiB: above
def test_a_hostile_value_in_any_other_label_is_carried_verbatim(kind: str) -> None:
    raw = alert(namespace="llm", pool="p", pod="p-0", summary=HOSTILE[kind], team=HOSTILE[kind])
    raw["labels"]["alertname"] = HOSTILE[kind]
    result = map_alert(0, raw, LabelMapping())
    assert isinstance(result, MappedFiring)
    assert result.lost.alertname == HOSTILE[kind]
    assert result.lost.labels["team"] == HOSTILE[kind]


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_log_line_stays_one_line_whatever_the_label(kind: str) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger(f"test.hostile.{kind.replace(' ', '-')}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("incident started: %s (alert %s)", "replica-loss/llm/p", HOSTILE[kind])
    text = out.getvalue()
    assert text.count("\n") == 1 and "\r" not in text and "\x1b" not in text
    assert "\u202e" not in text and "\x00" not in text
    assert text.startswith("WARNING ")


def test_control_characters_are_written_as_visible_escapes() -> None:
    assert escape_controls("a\nb\rc\x1bd\u202ee\\f") == "a\\x0ab\\x0dc\\x1bd\\u202ee\\\\f"
    assert escape_controls("ünïcødé 池") == "ünïcødé 池"


async def test_the_intakes_own_log_of_a_hostile_alert_is_one_line(
    intake: Intake, pool: str
) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(EscapingFormatter("%(message)s"))
    logger = logging.getLogger("fleetmend.intake")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        hostile = alert(namespace="llm", pool=pool, pod=f"{pool}-0")
        hostile["labels"]["alertname"] = HOSTILE["newline"]
        response = await intake.post(
            notification(hostile, groupKey=HOSTILE["carriage return"], truncatedAlerts=1)
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    assert response.status_code == 200
    lines = out.getvalue().splitlines()
    assert any("incident started" in line and "forged line" in line for line in lines)
    assert not any(line.startswith("2026-11-29 03:00:00 ERROR") for line in lines)
    assert not any(line.startswith("forged") for line in lines)


def test_a_urls_credentials_are_removed_from_every_message() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(EscapingFormatter("%(message)s"))
    logger = logging.getLogger("test.hostile.urls")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("POST %s failed", "https://bot:s3cret@hooks.example/x and postgresql://u:p@db/f")
    assert out.getvalue() == "POST https://hooks.example/x and postgresql://db/f failed\n"


def test_httpx_request_lines_are_not_logged_at_info() -> None:
    quiet, root = logging.getLogger("httpx"), logging.getLogger()
    previous, handlers, level = quiet.level, list(root.handlers), root.level
    try:
        configure_logging("INFO")
        assert not quiet.isEnabledFor(logging.INFO) and quiet.isEnabledFor(logging.WARNING)
    finally:
        quiet.setLevel(previous)
        root.handlers[:] = handlers
        root.setLevel(level)
