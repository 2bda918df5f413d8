"""Incident reports carry the same numbers in every format and escape hostile text."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ledger.report import (
    CapacitySample,
    EffectRow,
    FindingRow,
    IncidentReport,
    ReplicaSample,
    Summary,
    TimelineRow,
    render_html,
    render_json,
    render_markdown,
    write_report,
)

T0 = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
HOSTILE = "<script>alert('x')</script>\u202e|ünïcødé"


def _report(**changes: object) -> IncidentReport:
    report = IncidentReport(
        incident_id="replica-loss/serving/llm",
        namespace="serving",
        pool="llm",
        summary=Summary(
            severity="capacity-event",
            status="completed",
            capacity_lost="1 of 4 replicas (25%)",
            detection_s=4.0,
            switch_s=0.42,
            capacity_restored_s=38.5,
        ),
        timeline=[
            TimelineRow(
                step="deroute",
                started_at=T0,
                ended_at=T0 + timedelta(seconds=2),
                outcome="derouted",
                evidence={"pod": HOSTILE},
            ),
        ],
        effects=[
            EffectRow(
                op_id="replica-loss/serving/llm/deroute/pod/llm-0",
                kind="label-pod",
                target="serving/pod/llm-0",
                state="confirmed",
            )
        ],
        findings=[],
        replicas=[
            ReplicaSample(
                t=t, replica="llm-1", queue_depth=t / 10, ttft_p99_s=0.2, router_weight=100
            )
            for t in range(0, 60, 5)
        ],
        capacity=[
            CapacitySample(t=0, ready_capacity=80, demand=60),
            CapacitySample(t=10, ready_capacity=60, demand=60),
        ],
    )
    return report.model_copy(update=changes)


def test_markdown_html_and_json_show_the_same_summary_numbers() -> None:
    report = _report()
    md, page, data = render_markdown(report), render_html(report), json.loads(render_json(report))
    for shown in ("0.4 s", "38.5 s", "1 of 4 replicas (25%)", "capacity-event"):
        assert shown in md and shown in page
    assert data["summary"]["switch_s"] == 0.42
    assert data["summary_table"]["Effects applied"] == "1"


def test_html_is_one_self_contained_file_with_an_embedded_plot() -> None:
    page = render_html(_report())
    match = re.search(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert match is not None
    assert base64.b64decode(match.group(1)).startswith(b"\x89PNG")
    assert "http://" not in page and "https://" not in page


def test_hostile_labels_are_escaped_in_html() -> None:
    page = render_html(_report())
    assert "<script>alert" not in page
    assert "&lt;script&gt;" in page


def test_findings_are_listed_and_a_clean_run_says_so() -> None:
    assert "No duplicates, no orphans, no drift." in render_markdown(_report())
    dirty = _report(findings=[FindingRow(kind="duplicate", op_id="op-1", detail="applied twice")])
    assert "**duplicate** `op-1`" in render_markdown(dirty)
    assert json.loads(render_json(dirty))["summary_table"]["Duplicates"] == "1"


def test_markdown_is_written_with_its_plot_beside_it(tmp_path: Path) -> None:
    path = write_report(_report(), tmp_path, "md")
    png = tmp_path / "replica-loss_serving_llm.png"
    assert path.name == "replica-loss_serving_llm.md"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"![replicas and capacity]({png.name})" in path.read_text()


def test_a_report_without_samples_has_no_plot_but_renders() -> None:
    bare = _report(replicas=[], capacity=[])
    assert "data:image/png" not in render_html(bare)
    assert "## Timeline" in render_markdown(bare)
