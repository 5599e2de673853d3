"""`noderoll report`'s page: one self-contained HTML file for a `planning.views.rollout_report.RolloutReport`. Pure.

No script, no font, no image, no link: inline CSS and one inline SVG, and a Content-Security-Policy
that forbids loading anything, so the file opens the same offline, attached to a ticket or in a
post-mortem years later. The DOM is part of the contract of the browser test
(`tests/integration/test_report_browser.py`): each timeline row is `g.node-row[data-node]`, each
bar `rect.bar.<kind>`, each failure `.failure-mark[data-node]` (with its message as `<title>`), each
retry `.retry-mark`, each batch `.batch-mark` (`.canary` for the canary); the tables are
`#summary`, `#node-table` (a `tr[data-node]` per node) and `#failures`.
"""

from __future__ import annotations

from datetime import datetime
from html import escape

from planning.views.rollout_report import Bar, NodeReport, RolloutReport

COLOURS = {"drain": "#d9822b", "stage": "#3b7dd8", "check": "#2e9e68", "interrupt": "#8e44ad", "other": "#aab2bf"}
LEGEND = {
    "drain": "drain (cordon, protected pods, eviction)",
    "stage": "stage (apply, config, upgrade, post-interrupt, uninstall)",
    "check": "its check",
    "interrupt": "the merged interrupt (a reboot until the node is back)",
    "other": "state writes, uncordon, clean-up, package copy",
}
LABEL_WIDTH, PLOT_WIDTH, ROW_HEIGHT, AXIS_HEIGHT = 200, 1000, 22, 40
CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2430; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; } td, th { border: 1px solid #d5dae1; padding: 3px 8px; text-align: left; }
th { background: #f1f3f6; } .legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
.failure { color: #b3261e; } svg text { font: 11px system-ui, sans-serif; }
.row-label { fill: #1d2430; } .batch-mark line { stroke: #5b6472; stroke-dasharray: 4 3; }
.batch-mark.canary line { stroke: #b3261e; } .failure-mark { fill: #b3261e; } .retry-mark { fill: #e0a100; }
"""


def _x(moment: datetime, report: RolloutReport) -> float:
    assert report.start is not None and report.end is not None
    span = max((report.end - report.start).total_seconds(), 1.0)
    return LABEL_WIDTH + PLOT_WIDTH * (moment - report.start).total_seconds() / span


def _bar_svg(bar: Bar, y: int, report: RolloutReport, node: str) -> str:
    x0, x1 = _x(bar.start, report), _x(bar.end, report)
    height = 8 if bar.kind == "other" else 14
    top = y + (ROW_HEIGHT - height) / 2
    tip = f"{bar.label}: {bar.start.isoformat(timespec='seconds')} to {bar.end.isoformat(timespec='seconds')}"
    parts = [f'<rect class="bar {bar.kind}" x="{x0:.1f}" y="{top:.1f}" width="{max(x1 - x0, 1.5):.1f}" '
             f'height="{height}" fill="{COLOURS[bar.kind]}"><title>{escape(tip)}</title></rect>']
    if bar.retried:
        parts.append(f'<path class="retry-mark" data-node="{escape(node)}" d="M{x0:.1f},{y + 2} l5,0 l-2.5,5 z">'
                     f'<title>retried: {escape(bar.label)}</title></path>')
    if bar.failed:
        parts.append(f'<circle class="failure-mark" data-node="{escape(node)}" cx="{x1:.1f}" cy="{y + ROW_HEIGHT / 2}" '
                     f'r="5"><title>{escape(bar.label)} failed: {escape(bar.message)}</title></circle>')
    return "".join(parts)


def _row_svg(row: NodeReport, index: int, report: RolloutReport) -> str:
    y = AXIS_HEIGHT + index * ROW_HEIGHT
    shade = f'<rect x="0" y="{y}" width="{LABEL_WIDTH + PLOT_WIDTH}" height="{ROW_HEIGHT}" fill="#f6f7f9"/>' if index % 2 else ""
    bars = "".join(_bar_svg(b, y, report, row.node) for b in row.bars)
    return (f'<g class="node-row" data-node="{escape(row.node)}">{shade}'
            f'<text class="row-label" x="4" y="{y + 15}">{escape(row.node)}</text>{bars}</g>')


def _timeline(report: RolloutReport) -> str:
    if report.start is None or report.end is None or not report.nodes:
        return "<p>No window ran in the histories read.</p>"
    height = AXIS_HEIGHT + ROW_HEIGHT * len(report.nodes) + 10
    width = LABEL_WIDTH + PLOT_WIDTH + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="timeline of {escape(report.fleet_id)}">']
    span = (report.end - report.start).total_seconds()
    for tick in range(6):
        seconds = span * tick / 5
        x = LABEL_WIDTH + PLOT_WIDTH * tick / 5
        parts.append(f'<text x="{x:.0f}" y="12" text-anchor="middle">+{seconds:.0f}s</text>')
    parts.extend(_row_svg(row, i, report) for i, row in enumerate(report.nodes))
    for mark in report.marks:
        x = _x(mark.time, report)
        css = "batch-mark canary" if mark.canary else "batch-mark"
        parts.append(f'<g class="{css}"><line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="{height}"/>'
                     f'<text x="{x + 2:.1f}" y="30">{escape(mark.label)}</text>'
                     f'<title>{escape(mark.label)}: {escape(", ".join(mark.nodes))}</title></g>')
    parts.append("</svg>")
    return "".join(parts)


def _summary(report: RolloutReport) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in report.summary.items())
    return f'<table id="summary">{rows}</table>'


def _nodes(report: RolloutReport) -> str:
    head = "<tr><th>node</th><th>windows</th><th>cordons</th><th>drains</th><th>interrupts</th><th>record</th></tr>"
    rows = "".join(
        f'<tr data-node="{escape(r.node)}"><td>{escape(r.node)}</td><td>{r.windows}</td><td>{r.cordons}</td>'
        f'<td>{r.drains}</td><td>{r.interrupts}</td>'
        f'<td>{escape("; ".join(f"{p} {s}" for p, s in r.record.items()))}</td></tr>'
        for r in report.nodes)
    return f'<table id="node-table">{head}{rows}</table>'


def _failures(report: RolloutReport) -> str:
    if not report.failures:
        return '<p id="failures">No failure.</p>'
    items = "".join(
        f'<li class="failure" data-node="{escape(f.node)}">{escape(f.time.isoformat(timespec="seconds"))} '
        f'<b>{escape(f.node)}</b> {escape(f.what)}: {escape(f.message)}</li>' for f in report.failures)
    return f'<ul id="failures">{items}</ul>'


def render_html(report: RolloutReport) -> str:
    """The page (module docstring)."""
    legend = "".join(f'<span><i style="background:{COLOURS[k]}"></i>{escape(v)}</span>' for k, v in LEGEND.items())
    legend += ('<span><i style="background:#b3261e;border-radius:6px"></i>failure</span>'
               '<span><i style="background:#e0a100"></i>retry</span>')
    title = f"noderoll report: {report.fleet_id}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1><p>Generated {escape(report.generated_at)} from the Temporal histories of the "
        "fleet and its node windows and the nodes' records.</p>"
        f"<h2>Summary</h2>{_summary(report)}"
        f'<h2>Timeline</h2><div class="legend">{legend}</div>{_timeline(report)}'
        f"<h2>Nodes</h2>{_nodes(report)}"
        f"<h2>Failures</h2>{_failures(report)}"
        "</body></html>\n"
    )
