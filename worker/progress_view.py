"""Rendering of rollouts and nodes for the terminal (rich) and as JSON, plus change lines. Pure.

Every function here takes views already read by `worker.ops_client` and returns a rich renderable,
a JSON-ready dict or lines of text; nothing reads the cluster or the clock. The demo's live display
is `render_live(snapshot)`; without a terminal, `change_lines(before, after)` gives one line per
change instead, so CI logs stay readable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from api.enums import RolloutPhase, State
from api.node_state import PackageNodeState
from api.package import (
    DEFAULT_INTERRUPT_TIMEOUT_SECONDS,
    DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS,
    DEFAULT_STAGE_TIMEOUT_SECONDS,
    Limits,
)
from planning.drain import drains_window
from planning.status import RolloutProgress
from worker.ops_client import NodeView, PackageView

ZONE_LABEL = "topology.kubernetes.io/zone"
STATE_STYLE = {
    State.COMPLETE: "green", State.IN_PROGRESS: "yellow", State.ERRORING: "red",
    State.BLOCKED: "magenta", State.WAITING: "dim", State.SKIPPED: "cyan",
}
PHASE_STYLE = {
    RolloutPhase.COMPLETE: "bold green", RolloutPhase.FAILED: "bold red", RolloutPhase.HALTED: "bold red",
    RolloutPhase.INVALID: "bold red", RolloutPhase.PAUSED: "bold yellow", RolloutPhase.CANARY: "bold cyan",
    RolloutPhase.BLOCKED: "bold magenta",
}
COUNT_ORDER = (State.WAITING, State.IN_PROGRESS, State.COMPLETE, State.ERRORING, State.BLOCKED, State.SKIPPED)


def _count(progress: RolloutProgress, state: State) -> int:
    return int(progress.counts.get(state.value, 0))


def _batch(progress: RolloutProgress) -> str:
    return f"#{progress.batch_number} ({progress.batch_size} node(s))" if progress.batch_number else "-"


def limits_json(limits: Limits) -> dict[str, dict[str, Any]]:
    """Each limit of a Package in seconds and whether it is the worker's default (unset)."""
    defaults = {"protectedPodsTimeoutSeconds": DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS,
                "stageTimeoutSeconds": DEFAULT_STAGE_TIMEOUT_SECONDS,
                "interruptTimeoutSeconds": DEFAULT_INTERRUPT_TIMEOUT_SECONDS}
    given = limits.dump()
    return {key: {"seconds": given.get(key, default), "default": key not in given} for key, default in defaults.items()}


def limits_text(limits: Limits) -> str:
    """`protected pods 7200 s, stage 1800 s (default), interrupt 900 s (default)`."""
    words = {"protectedPodsTimeoutSeconds": "protected pods", "stageTimeoutSeconds": "stage",
             "interruptTimeoutSeconds": "interrupt"}
    return ", ".join(f"{words[key]} {value['seconds']} s" + (" (default)" if value["default"] else "")
                     for key, value in limits_json(limits).items())


def progress_json(view: PackageView) -> dict[str, Any]:
    """The JSON of `noderoll status -o json` for one package."""
    data = asdict(view.progress)
    data["phase"] = view.progress.phase.value
    data["canary_phase"] = str(view.progress.canary_phase)
    data["drain_blocked"] = [asdict(b) for b in view.drain_blocked]
    extra = {"limits": limits_json(view.limits)} if view.limits is not None else {}
    return {"package": view.name, "source": view.source, **data, **extra}


def status_table(views: list[PackageView]) -> Table:
    """One row per package: phase, counts per state, batch, canary and message."""
    table = Table(title="noderoll rollouts", title_justify="left")
    for column in ("PACKAGE", "VERSION", "PHASE", "DONE", "WAITING", "IN PROGRESS", "ERRORING", "BLOCKED",
                   "BATCH", "CANARY", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for view in views:
        p = view.progress
        table.add_row(
            view.name, p.version or "-", Text(p.phase.value, style=PHASE_STYLE.get(p.phase, "")),
            f"{_count(p, State.COMPLETE)}/{p.total_nodes}", str(_count(p, State.WAITING)),
            str(_count(p, State.IN_PROGRESS)), str(_count(p, State.ERRORING)), str(_count(p, State.BLOCKED)),
            _batch(p), str(p.canary_phase), p.message or "",
        )
    return table


def package_detail(view: PackageView) -> Group:
    """`noderoll status PACKAGE`: phase, counts per state, batch, canary, blocked and erroring nodes."""
    p = view.progress
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("package", view.name)
    head.add_row("version", p.version or "-")
    head.add_row("phase", Text(p.phase.value, style=PHASE_STYLE.get(p.phase, "")))
    head.add_row("nodes", f"{_count(p, State.COMPLETE)}/{p.total_nodes} complete; " + ", ".join(
        f"{s.value} {_count(p, s)}" for s in COUNT_ORDER if _count(p, s)))
    head.add_row("batch", _batch(p))
    head.add_row("canary", f"{p.canary_phase} {', '.join(p.canary_nodes)}".strip())
    if p.message:
        head.add_row("message", p.message)
    if view.limits is not None:
        head.add_row("limits", limits_text(view.limits))
    head.add_row("source", view.source)
    parts: list[RenderableType] = [head]
    for title, reasons in (("blocked nodes", p.blocked), ("erroring nodes", p.erroring)):
        if reasons:
            table = Table(title=title, title_justify="left")
            table.add_column("NODE")
            table.add_column("REASON", overflow="fold")
            for node, reason in sorted(reasons.items()):
                table.add_row(node, reason or "-")
            parts.append(table)
    if view.drain_blocked:
        table = Table(title="drain blocked (the window waits)", title_justify="left")
        for column in ("NODE", "REASON", "DRAINING SINCE", "BLOCKED BY"):
            table.add_column(column, overflow="fold")
        for block in view.drain_blocked:
            table.add_row(block.node, block.reason, block.since or "-", block.message)
        parts.append(table)
    return Group(*parts)


def _cell(node: NodeView, entry: PackageNodeState | None) -> Text:
    if entry is None:
        return Text("-", style="dim")
    stage, state, _ = shown_entry(node, entry)
    shown = f" {stage}" if stage and state is not State.COMPLETE else ""
    return Text(f"{state.value}{shown}", style=STATE_STYLE.get(state, ""))


def _node_flags(node: NodeView) -> str:
    flags = ["Ready" if node.ready else "NotReady"]
    if node.cordoned:
        flags.append("cordoned" + (" (noderoll)" if node.cordoned_by_noderoll else ""))
    return ", ".join(flags)


DRAIN_STAGE = "drain"


def shown_entry(node: NodeView, entry: PackageNodeState) -> tuple[str, State, str]:
    """(stage, state, message) of a package on a node as the CLI shows it. Pure.

    The recorded entry, except while the node's drain belongs to the entry's window (the
    `noderoll.io/Draining` condition): stage `drain`, state `blocked` while it waits on someone
    else's pods (else `in_progress`), and the condition's message.
    """
    if drains_window(node.drain, entry) and node.drain is not None:
        return DRAIN_STAGE, State.BLOCKED if node.drain.blocked else State.IN_PROGRESS, node.drain.message
    stage = entry.stage.value if entry.stage is not None else ""
    return stage, entry.state, entry.last_error or ""


def nodes_table(nodes: list[NodeView]) -> Table:
    """`noderoll nodes`: per node and package: version, stage, state, attempts, last error or blocker."""
    table = Table(title="nodes", title_justify="left")
    for column in ("NODE", "STATUS", "NODE STATE", "PACKAGE", "VERSION", "STAGE", "STATE", "ATTEMPTS",
                   "LAST ERROR / BLOCKED BY"):
        table.add_column(column, overflow="fold")
    for node in nodes:
        entries = sorted(node.packages.items()) or [("-", None)]
        for index, (name, entry) in enumerate(entries):
            first = index == 0
            stage, state, message = shown_entry(node, entry) if entry else ("", State.WAITING, "")
            table.add_row(
                node.name if first else "", (node.status or "-") if first else "",
                _node_flags(node) if first else "", name, entry.version if entry else "", stage,
                Text(state.value, style=STATE_STYLE.get(state, "")) if entry
                else Text(node.state_problem or "", style="red"),
                str(entry.attempts) if entry else "", message,
            )
    return table


def _shown_json(node: NodeView, entry: PackageNodeState) -> dict[str, str]:
    stage, state, message = shown_entry(node, entry)
    return {"stage": stage, "state": state.value, "message": message}


def nodes_json(nodes: list[NodeView]) -> list[dict[str, Any]]:
    """The JSON of `noderoll nodes -o json`: the recorded entries, and the drain as the table shows it."""
    return [
        {
            "node": n.name, "status": n.status, "ready": n.ready, "cordoned": n.cordoned,
            "cordonedByNoderoll": n.cordoned_by_noderoll, "stateProblem": n.state_problem,
            "drain": asdict(n.drain) if n.drain is not None else None,
            "packages": {name: e.model_dump(mode="json", by_alias=True, exclude_none=True)
                         for name, e in sorted(n.packages.items())},
            "shown": {name: _shown_json(n, e) for name, e in sorted(n.packages.items())},
        }
        for n in nodes
    ]


@dataclass
class LiveSnapshot:
    """What the demo shows at one moment: each rollout's progress and the fleet's nodes."""

    packages: dict[str, RolloutProgress] = field(default_factory=dict)
    nodes: list[NodeView] = field(default_factory=list)
    elapsed: float = 0.0
    # package -> node -> batch number in which the node was first seen working (see BatchLog).
    batches: dict[str, dict[str, int]] = field(default_factory=dict)


def record_batches(snapshot: LiveSnapshot) -> None:
    """Assign each node that started a package to that rollout's current batch (first sight wins)."""
    for package, progress in snapshot.packages.items():
        seen = snapshot.batches.setdefault(package, {})
        for node in snapshot.nodes:
            entry = node.packages.get(package)
            if entry is not None and entry.state is not State.WAITING and node.name not in seen:
                seen[node.name] = max(progress.batch_number, 1)


def _batch_lines(package: str, snapshot: LiveSnapshot) -> list[Text]:
    states = {n.name: n.packages.get(package) for n in snapshot.nodes}
    by_batch: dict[int, list[str]] = {}
    for node, number in sorted(snapshot.batches.get(package, {}).items()):
        by_batch.setdefault(number, []).append(node)
    lines = []
    for number, members in sorted(by_batch.items()):
        line = Text(f"    batch {number}: ")
        for node in members:
            entry = states.get(node)
            state = entry.state if entry else State.WAITING
            line.append(f"{node} ", style=STATE_STYLE.get(state, ""))
        lines.append(line)
    return lines


def render_live(snapshot: LiveSnapshot) -> Group:
    """The demo's live display: per rollout its phase and batches, then a node-by-package grid."""
    parts: list[RenderableType] = [Text(f"noderoll demo — {snapshot.elapsed:.0f}s", style="bold")]
    for package, p in sorted(snapshot.packages.items()):
        header = Text(f"  {package} {p.version}: ")
        header.append(p.phase.value, style=PHASE_STYLE.get(p.phase, ""))
        header.append(f"  {_count(p, State.COMPLETE)}/{p.total_nodes} complete, batch {_batch(p)}, "
                      f"canary {p.canary_phase}")
        if p.erroring:
            header.append(f", {len(p.erroring)} erroring", style="red")
        parts.append(header)
        parts.extend(_batch_lines(package, snapshot))
    grid = Table(box=None, padding=(0, 1), show_edge=False)
    grid.add_column("NODE")
    grid.add_column("ZONE")
    grid.add_column("NODE STATE")
    names = sorted(snapshot.packages)
    for name in names:
        grid.add_column(name)
    for node in snapshot.nodes:
        grid.add_row(node.name, node.labels.get(ZONE_LABEL, "-"), _node_flags(node),
                     *(_cell(node, node.packages.get(name)) for name in names))
    parts.append(grid)
    return Group(*parts)


def _entry_text(node: NodeView, entry: PackageNodeState | None) -> str:
    if entry is None:
        return "-"
    stage, state, message = shown_entry(node, entry)
    text = f"{state.value}" + (f" ({stage})" if stage else "")
    return text + (f": {message}" if state is State.BLOCKED and message else "")


def change_lines(before: LiveSnapshot | None, after: LiveSnapshot) -> list[str]:
    """One line per change between two snapshots (the display without a terminal)."""
    lines: list[str] = []
    stamp = f"[{after.elapsed:6.1f}s]"
    old_packages = before.packages if before else {}
    for package, p in sorted(after.packages.items()):
        old = old_packages.get(package)
        if old is None or (old.phase, old.batch_number, old.canary_phase) != (p.phase, p.batch_number, p.canary_phase):
            lines.append(f"{stamp} {package}: phase {p.phase.value}, batch {_batch(p)}, canary {p.canary_phase}, "
                         f"{_count(p, State.COMPLETE)}/{p.total_nodes} complete")
    old_nodes = {n.name: n for n in before.nodes} if before else {}
    for node in after.nodes:
        old_node = old_nodes.get(node.name)
        if old_node is not None and _node_flags(old_node) != _node_flags(node):
            lines.append(f"{stamp} {node.name}: {_node_flags(node)}")
        for package in sorted(after.packages):
            entry = node.packages.get(package)
            old_entry = old_node.packages.get(package) if old_node else None
            before_text = _entry_text(old_node, old_entry) if old_node is not None else "-"
            if _entry_text(node, entry) != before_text and entry is not None:
                lines.append(f"{stamp} {node.name} {package}: {_entry_text(node, entry)}")
    return lines
