"""Incident reports: Markdown, a self-contained HTML page and JSON, with plots.

Called from `fleetmend report` and `fleetmend drill` once an incident closed and its
reconciliation ran. The input is one plain model (`IncidentReport`) that the caller fills
from the workflow's status, the ledger and the drill's samples; this module only renders,
so the same numbers appear in every format. Everything taken from outside (labels, pod
names, evidence) is escaped in the HTML: an alert label is attacker-controlled text.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import unicodedata
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

Format = Literal["md", "html", "json"]


class TimelineRow(BaseModel):
    step: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


class EffectRow(BaseModel):
    op_id: str
    kind: str
    target: str
    state: str
    attempts: int = 1
    compensates: str | None = None


class FindingRow(BaseModel):
    kind: Literal["duplicate", "orphan", "drift"]
    op_id: str
    detail: str = ""


class ReplicaSample(BaseModel):
    """One replica at one instant of the incident, as the drill or the worker read it."""

    t: float  # seconds since the incident opened
    replica: str
    queue_depth: float = 0.0
    ttft_p99_s: float | None = None
    router_weight: float | None = None


class CapacitySample(BaseModel):
    t: float
    ready_capacity: float  # requests/s the ready, routed replicas can serve
    demand: float | None = None


class Summary(BaseModel):
    severity: str
    status: str
    capacity_lost: str = ""  # e.g. "1 of 4 replicas (25%)"
    detection_s: float | None = None  # fault -> alert received
    switch_s: float | None = None  # alert received -> endpoint out of the ready set
    capacity_restored_s: float | None = None  # alert received -> warm floor restored
    common_cause: str | None = None
    notes: list[str] = Field(default_factory=list)


class IncidentReport(BaseModel):
    incident_id: str
    namespace: str
    pool: str
    opened_at: datetime | None = None
    closed_at: datetime | None = None
    summary: Summary
    timeline: list[TimelineRow] = Field(default_factory=list)
    effects: list[EffectRow] = Field(default_factory=list)
    findings: list[FindingRow] = Field(default_factory=list)
    replicas: list[ReplicaSample] = Field(default_factory=list)
    capacity: list[CapacitySample] = Field(default_factory=list)


def _fmt_s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def _summary_rows(report: IncidentReport) -> list[tuple[str, str]]:
    s = report.summary
    rows = [
        ("Severity", s.severity),
        ("Status", s.status),
        ("Capacity lost", s.capacity_lost or "n/a"),
        ("Detection (fault -> alert)", _fmt_s(s.detection_s)),
        ("Switch (alert -> out of ready set)", _fmt_s(s.switch_s)),
        ("Capacity restored (alert -> warm floor)", _fmt_s(s.capacity_restored_s)),
        ("Effects applied", str(sum(e.state in ("applied", "confirmed") for e in report.effects))),
        ("Duplicates", str(sum(f.kind == "duplicate" for f in report.findings))),
        ("Orphans", str(sum(f.kind == "orphan" for f in report.findings))),
        ("Drift", str(sum(f.kind == "drift" for f in report.findings))),
    ]
    if s.common_cause:
        rows.append(("Common cause", s.common_cause))
    return rows


def plot_png(report: IncidentReport) -> bytes | None:
    """Per-replica queue depth, TTFT p99 and router weight, and the capacity curve."""
    if not report.replicas and not report.capacity:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    by_replica: dict[str, list[ReplicaSample]] = {}
    for sample in sorted(report.replicas, key=lambda r: r.t):
        by_replica.setdefault(sample.replica, []).append(sample)
    panels = [
        (axes[0], "queue depth", lambda r: r.queue_depth),
        (axes[1], "TTFT p99 (s)", lambda r: r.ttft_p99_s),
        (axes[2], "router weight", lambda r: r.router_weight),
    ]
    for ax, label, value in panels:
        for replica, samples in by_replica.items():
            points = [(s.t, value(s)) for s in samples if value(s) is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], label=replica)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if by_replica:
        axes[0].legend(fontsize=7, ncol=3, loc="upper right")
    cap = sorted(report.capacity, key=lambda c: c.t)
    axes[3].step(
        [c.t for c in cap], [c.ready_capacity for c in cap], where="post", label="ready capacity"
    )
    demand = [(c.t, c.demand) for c in cap if c.demand is not None]
    if demand:
        axes[3].plot([d[0] for d in demand], [d[1] for d in demand], "--", label="demand")
    axes[3].set_ylabel("requests/s")
    axes[3].set_xlabel("seconds since the incident opened")
    axes[3].legend(fontsize=7, loc="lower right")
    axes[3].grid(alpha=0.3)
    fig.suptitle(f"{report.incident_id}: replicas and capacity")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]|~#!])")


def _one_line(text: object) -> str:
    # Line breaks and other control or format characters (bidi overrides) would let a
    # label rewrite the document's structure or what a reader sees; they become spaces.
    return "".join(" " if unicodedata.category(c) in ("Cc", "Cf") else c for c in str(text))


def _md_cell(text: object) -> str:
    """Text for Markdown prose or a table cell: HTML-escaped, punctuation escaped."""
    return _MD_PUNCTUATION.sub(r"\\\1", html.escape(_one_line(text), quote=False))


def _md_code(text: object) -> str:
    """Text inside a `code span`: shown literally, so only what could close it is changed."""
    return _one_line(text).replace("`", "'").replace("|", "\\|")


def render_markdown(report: IncidentReport, plot_file: str | None = None) -> str:
    out = [f"# Incident {_md_cell(report.incident_id)}", ""]
    out += [f"Pool `{_md_code(report.namespace)}/{_md_code(report.pool)}`", ""]
    out += ["## Summary", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_md_cell(v)} |" for k, v in _summary_rows(report)]
    for note in report.summary.notes:
        out.append(f"\n- {_md_cell(note)}")
    if plot_file:
        out += ["", f"![replicas and capacity]({plot_file})"]
    out += [
        "",
        "## Timeline",
        "",
        "| step | started | duration | outcome | evidence |",
        "|---|---|---|---|---|",
    ]
    for row in report.timeline:
        started = row.started_at.isoformat(timespec="seconds") if row.started_at else ""
        evidence = json.dumps(row.evidence, sort_keys=True, default=str)
        out.append(
            f"| {_md_cell(row.step)} | {started} | {_fmt_s(row.duration_s)} | "
            f"{_md_cell(row.outcome)} | {_md_cell(evidence)} |"
        )
    out += [
        "",
        "## Effects",
        "",
        "| operation id | kind | target | state | attempts |",
        "|---|---|---|---|---|",
    ]
    for e in report.effects:
        out.append(
            f"| `{_md_code(e.op_id)}` | {_md_cell(e.kind)} | {_md_cell(e.target)} | {e.state} | {e.attempts} |"
        )
    out += ["", "## Reconciliation", ""]
    if not report.findings:
        out.append("No duplicates, no orphans, no drift.")
    for f in report.findings:
        out.append(f"- **{_md_cell(f.kind)}** `{_md_code(f.op_id)}`: {_md_cell(f.detail)}")
    return "\n".join(out) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
font-size:13px;vertical-align:top}th{background:#f3f3f3}code{font-size:12px}
.bad{color:#b00;font-weight:bold}"""


def render_html(report: IncidentReport) -> str:
    def e(text: object) -> str:
        return html.escape(_one_line(text))

    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Incident {e(report.incident_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Incident {e(report.incident_id)}</h1>",
        f"<p>Pool <code>{e(report.namespace)}/{e(report.pool)}</code></p>",
        "<h2>Summary</h2><table>",
    ]
    parts += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _summary_rows(report)]
    parts.append("</table>")
    if report.summary.notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in report.summary.notes) + "</ul>")
    png = plot_png(report)
    if png is not None:
        data = base64.b64encode(png).decode()
        parts.append(f"<img alt='replicas and capacity' src='data:image/png;base64,{data}'>")
    parts.append(
        "<h2>Timeline</h2><table><tr><th>step</th><th>started</th><th>duration</th><th>outcome</th><th>evidence</th></tr>"
    )
    for row in report.timeline:
        started = row.started_at.isoformat(timespec="seconds") if row.started_at else ""
        evidence = json.dumps(row.evidence, sort_keys=True, default=str)
        parts.append(
            f"<tr><td>{e(row.step)}</td><td>{e(started)}</td><td>{e(_fmt_s(row.duration_s))}</td>"
            f"<td>{e(row.outcome)}</td><td><code>{e(evidence)}</code></td></tr>"
        )
    parts.append(
        "</table><h2>Effects</h2><table><tr><th>operation id</th><th>kind</th><th>target</th><th>state</th><th>attempts</th></tr>"
    )
    for eff in report.effects:
        parts.append(
            f"<tr><td><code>{e(eff.op_id)}</code></td><td>{e(eff.kind)}</td><td>{e(eff.target)}</td>"
            f"<td>{e(eff.state)}</td><td>{eff.attempts}</td></tr>"
        )
    parts.append("</table><h2>Reconciliation</h2>")
    if not report.findings:
        parts.append("<p>No duplicates, no orphans, no drift.</p>")
    else:
        parts.append("<ul>")
        parts += [
            f"<li><span class='bad'>{e(f.kind)}</span> <code>{e(f.op_id)}</code>: {e(f.detail)}</li>"
            for f in report.findings
        ]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_json(report: IncidentReport) -> str:
    payload = report.model_dump(mode="json")
    payload["summary_table"] = dict(_summary_rows(report))
    return json.dumps(payload, indent=2, sort_keys=True)


def write_report(report: IncidentReport, out_dir: Path, fmt: Format) -> Path:
    """Write one format under `out_dir`; Markdown also gets its plot as a PNG beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report.incident_id.replace("/", "_")
    if fmt == "json":
        path = out_dir / f"{stem}.json"
        path.write_text(render_json(report))
    elif fmt == "html":
        path = out_dir / f"{stem}.html"
        path.write_text(render_html(report))
    else:
        png = plot_png(report)
        plot_name = None
        if png is not None:
            plot_name = f"{stem}.png"
            (out_dir / plot_name).write_bytes(png)
        path = out_dir / f"{stem}.md"
        path.write_text(render_markdown(report, plot_name))
    return path
