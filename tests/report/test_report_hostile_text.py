"""Hostile label text in a report: escaped in HTML and Markdown, one table row per line."""

from __future__ import annotations

import re

import pytest

from ledger.report import EffectRow, FindingRow, TimelineRow, render_html, render_markdown
from tests.intake.hostile import HOSTILE
from tests.report.test_report_rendering import T0, _report

KINDS = sorted(set(HOSTILE) - {"very long"})


def hostile_report(text: str):  # type: ignore[no-untyped-def]
    return _report(
        timeline=[
            TimelineRow(
                step="deroute",
                started_at=T0,
                ended_at=T0,
                outcome=text,
                evidence={"pod": text, text: [text]},
            ),
        ],
        effects=[EffectRow(op_id=f"i/deroute/{text}", kind=text, target=text, state="confirmed")],
        findings=[FindingRow(kind="duplicate", op_id=text, detail=text)],
    )


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


@pytest.mark.parametrize("kind", KINDS)
def test_markdown_keeps_its_structure_and_shows_no_live_markup(kind: str) -> None:
    page = render_markdown(hostile_report(HOSTILE[kind]))
    lines = page.splitlines()
    timeline = lines[lines.index("## Timeline") + 4]
    effect = lines[lines.index("## Effects") + 4]
    assert timeline.startswith("| deroute |") and unescaped_pipes(timeline) == 6
    assert unescaped_pipes(effect) == 6
    prose = re.sub(r"`[^`\n]*`", "", page)  # a code span shows its text literally
    assert "<script" not in prose
    assert not re.search(r"(?<!\\)\]\((?!replicas)", prose), "a live Markdown link or image"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", page)
    assert lines[lines.index("## Reconciliation") + 2].startswith("- **duplicate** `")


@pytest.mark.parametrize("kind", KINDS)
def test_html_escapes_every_field_and_drops_control_characters(kind: str) -> None:
    page = render_html(hostile_report(HOSTILE[kind]))
    assert "<script>alert" not in page
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", page)
    if kind == "script":
        assert "&lt;script&gt;" in page
