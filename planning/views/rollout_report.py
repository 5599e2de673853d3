"""`noderoll report`: a rollout as a timeline, from its histories read as plain data. Pure.

Input: the fleet's runs and each node's window runs as `RunHistory` (activities with their times,
attempts, failures, inputs and results; signals), read from Temporal by `cli.rollout_history`, and
the nodes' records (`noderoll.io/state`). `build_report` turns them into a `RolloutReport`:
* per node, one bar per activity of its windows, by kind: `drain` (cordon, protected pods, drain),
  `stage`, `check` and `interrupt` (a stage pod is split by its containers' own start and end times,
  which `run_stage_pod` reports; a pod of a run before that is one bar, coloured `stage`, or
  `interrupt` when it carries the merged interrupt; after a reboot, its confirmation), `other`
  (state writes, uncordon, clean-up, the package copy); a failure mark where an activity failed or a stage pod
  exited non-zero (with the message), a retry mark where Temporal retried an activity or the
  window retried a stage (attempt > 1);
* the fleet's marks on the time axis: each hand-over of windows (`request_windows`) is a batch, the
  one carrying the canary nodes is the canary;
* per node the disruptions the fleet counted from the answers (`window_result`: windows, cordons,
  drains, interrupts) and the Packages that ended erroring there, with their messages;
* the fleet's summary (times, batches, nodes, windows, disruptions, failures).
`planning.views.report_html.render_html` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from api.enums import Stage
from protocol.names import fleet_workflow_id

DRAIN_ACTIVITIES = ("cordon_node", "wait_protected_pods", "drain_node")
CHECK_SUFFIX = "-check"
STAGE_MODES = frozenset(s.value for s in Stage)


@dataclass
class ActivityRun:
    """One activity of a history (every attempt together)."""

    type: str
    input: Any
    scheduled: datetime
    started: datetime | None = None
    ended: datetime | None = None
    # Attempts Temporal made (1: no retry).
    attempts: int = 1
    # "completed", "failed", "timed out", "canceled", "" (still running when the history was read).
    outcome: str = ""
    failure: str = ""
    result: Any = None


@dataclass
class Signal:
    """One signal a workflow received."""

    name: str
    time: datetime
    payload: Any = None


@dataclass
class RunHistory:
    """One run of a workflow: its id, start and close, activities and signals."""

    workflow_id: str
    run_id: str
    started: datetime
    closed: datetime | None = None
    activities: list[ActivityRun] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)


@dataclass(frozen=True)
class ReportInput:
    """Everything a report is drawn from."""

    policy: str
    fleet: Sequence[RunHistory]
    # Node -> its window runs, oldest first.
    nodes: Mapping[str, Sequence[RunHistory]]
    # Node -> its `noderoll.io/state` as JSON ({} when absent).
    records: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    canary: Sequence[str] = ()
    # The fleet's phase and message as last reported ("" unknown).
    phase: str = ""
    message: str = ""
    generated_at: str = ""
    # The cluster's name ("" none): the fleet is `fleet/<cluster>/<policy>`.
    cluster: str = ""


@dataclass
class Bar:
    """One activity on a node's row."""

    kind: str
    label: str
    start: datetime
    end: datetime
    failed: bool = False
    retried: bool = False
    message: str = ""


@dataclass
class Mark:
    """A point on the time axis: a batch handed out (the canary's included)."""

    time: datetime
    label: str
    canary: bool = False
    nodes: list[str] = field(default_factory=list)


@dataclass
class Failure:
    """Something that failed on a node: an activity, a stage pod, or a Package's outcome."""

    node: str
    time: datetime
    what: str
    message: str


@dataclass
class NodeReport:
    """One row of the timeline, and the node's line in the tables."""

    node: str
    bars: list[Bar] = field(default_factory=list)
    windows: int = 0
    cordons: int = 0
    drains: int = 0
    interrupts: int = 0
    # Package -> "version state" from the node's record.
    record: dict[str, str] = field(default_factory=dict)


@dataclass
class RolloutReport:
    """A rollout, ready to draw."""

    policy: str
    # The fleet's workflow id (`fleet/<policy>`, `fleet/<cluster>/<policy>`).
    fleet_id: str
    start: datetime | None = None
    end: datetime | None = None
    nodes: list[NodeReport] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    summary: dict[str, str] = field(default_factory=dict)
    generated_at: str = ""


def _pod_kind(job: Mapping[str, Any]) -> str:
    modes = list(job.get("modes") or [job.get("mode", "")])
    if job.get("interrupt") or modes == ["interrupt"]:
        return "interrupt"
    if modes and all(m.endswith(CHECK_SUFFIX) for m in modes):
        return "check"
    return "stage"


def _bar(activity: ActivityRun, closed: datetime | None) -> Bar:
    end = activity.ended or closed or activity.started or activity.scheduled
    start = activity.started if activity.started and activity.attempts == 1 else activity.scheduled
    data = activity.input if isinstance(activity.input, dict) else {}
    job = data.get("job") if isinstance(data.get("job"), dict) else None
    if activity.type in DRAIN_ACTIVITIES:
        kind, label = "drain", activity.type.replace("_", " ")
    elif job is not None:
        kind = _pod_kind(job)
        label = f"{job.get('package', '')} {', '.join(job.get('modes') or [job.get('mode', '')])}"
    elif activity.type == "run_interrupt":
        kind, label = "interrupt", "interrupt"
    else:
        kind, label = "other", activity.type.replace("_", " ")
    result = activity.result if isinstance(activity.result, dict) else {}
    exit_code = result.get("exit_code", 0) if job is not None else 0
    failed = activity.outcome in ("failed", "timed out") or bool(exit_code)
    message = activity.failure or (f"{result.get('mode', '')} exited {exit_code}: {result.get('log_tail', '')}".strip()
                                   if exit_code else "")
    retried = activity.attempts > 1 or (job is not None and int(job.get("attempt", 1)) > 1)
    return Bar(kind, label, start, end, failed, retried, message)


def _mode_kind(mode: str) -> str:
    if mode == "interrupt":
        return "interrupt"
    if mode.endswith(CHECK_SUFFIX):
        return "check"
    return "stage" if mode in STAGE_MODES else "other"


def _segments(bar: Bar, activity: ActivityRun) -> list[Bar]:
    """A stage pod's bar split by its containers' own start and end times (when the activity reported them)."""
    result = activity.result if isinstance(activity.result, dict) else {}
    times = result.get("containers") or {}
    package = bar.label.split(" ")[0]
    parts = sorted((datetime.fromisoformat(t[0]), datetime.fromisoformat(t[1]), mode)
                   for mode, t in times.items() if isinstance(t, list) and len(t) == 2)
    if not parts:
        return [bar]
    segments = [Bar(_mode_kind(mode), f"{package} {mode}", start, end) for start, end, mode in parts]
    if bar.kind == "interrupt" and parts[-1][1] < bar.end:
        # A reboot: the node came back (new boot id, Ready) after the interrupt's container ended.
        segments.append(Bar("interrupt", f"{package} reboot confirmation", parts[-1][1], bar.end))
    segments[-1].failed, segments[-1].message = bar.failed, bar.message
    segments[0].retried = bar.retried
    return segments


def _node_report(node: str, runs: Sequence[RunHistory], record: Mapping[str, Any]) -> tuple[NodeReport, list[Failure]]:
    row = NodeReport(node)
    failures = []
    for run in runs:
        for activity in run.activities:
            bar = _bar(activity, run.closed)
            row.bars.extend(_segments(bar, activity) if activity.type == "run_stage_pod" else [bar])
            if bar.failed:
                failures.append(Failure(node, bar.end, bar.label, bar.message or activity.outcome))
    for name, entry in sorted((record.get("packages") or {}).items()):
        if isinstance(entry, dict):
            row.record[name] = f"{entry.get('version', '')} {entry.get('state', '')}".strip()
    return row, failures


def _marks(fleet: Sequence[RunHistory], canary: Sequence[str]) -> list[Mark]:
    marks: list[Mark] = []
    handed = [a for run in fleet for a in run.activities if a.type == "request_windows"]
    number = 0
    for activity in handed:
        nodes = sorted((activity.input or {}).get("nodes") or [])
        is_canary = bool(canary) and set(nodes) <= set(canary)
        if not marks or not is_canary or not marks[-1].canary:
            number += 1
        marks.append(Mark(activity.scheduled, "canary" if is_canary else f"batch {number}", is_canary, nodes))
    return marks


def build_report(data: ReportInput) -> RolloutReport:
    """The report of `data` (module docstring)."""
    report = RolloutReport(policy=data.policy, fleet_id=fleet_workflow_id(data.policy, data.cluster),
                           generated_at=data.generated_at)
    answers = [(s.time, s.payload) for run in data.fleet for s in run.signals
               if s.name == "window_result" and isinstance(s.payload, dict)]
    outcome_failures: list[Failure] = []
    for node in sorted(data.nodes):
        row, failures = _node_report(node, data.nodes[node], data.records.get(node) or {})
        report.nodes.append(row)
        report.failures.extend(failures)
    rows = {r.node: r for r in report.nodes}
    for when, answer in answers:
        row = rows.get(answer.get("node", ""))
        if row is None or answer.get("withdrawn"):
            continue
        row.windows += 1
        row.cordons += int(bool(answer.get("cordoned")))
        row.drains += int(bool(answer.get("drained")))
        row.interrupts += int(bool(answer.get("interrupt")))
        for package, outcome in sorted((answer.get("outcomes") or {}).items()):
            if isinstance(outcome, dict) and outcome.get("state") == "erroring":
                outcome_failures.append(Failure(row.node, when, f"{package} erroring", outcome.get("message", "")))
    report.failures = sorted([*report.failures, *outcome_failures], key=lambda f: (f.time, f.node))
    report.marks = _marks(data.fleet, data.canary)
    moments = [m for r in report.nodes for b in r.bars for m in (b.start, b.end)] + [m.time for m in report.marks]
    if moments:
        report.start, report.end = min(moments), max(moments)
    report.summary = _summary(data, report)
    return report


def _summary(data: ReportInput, report: RolloutReport) -> dict[str, str]:
    rows = report.nodes
    seconds = (report.end - report.start).total_seconds() if report.start and report.end else 0.0
    summary = {
        "fleet": report.fleet_id,
        "phase": data.phase or "unknown",
        "started": report.start.isoformat(timespec="seconds") if report.start else "",
        "ended": report.end.isoformat(timespec="seconds") if report.end else "",
        "duration": f"{seconds:.0f} s",
        "batches": str(len({m.label for m in report.marks})),
        "canary": ", ".join(data.canary) or "none",
        "nodes": str(len(rows)),
        "windows": str(sum(r.windows for r in rows)),
        "cordons": str(sum(r.cordons for r in rows)),
        "drains": str(sum(r.drains for r in rows)),
        "interrupts": str(sum(r.interrupts for r in rows)),
        "failures": str(len(report.failures)),
    }
    if data.message:
        summary["message"] = data.message
    return summary
