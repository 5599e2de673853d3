"""The demo's live display of one fleet rollout, and its line-per-change form without a terminal. Pure.

A `LiveSnapshot` is what one poll saw: the fleet's progress (phase, wave, batch, canary, per node its
state and disruptions), each Package's progress, and the Nodes (flags, per-package state, boot id).
`observe(snapshot)` carries forward what only a sequence of snapshots shows: the batch in which each
node was first seen in a window, every boot id each node had (a new one per reboot: an count of
reboots independent of noderoll's own accounting), and, read off the Nodes themselves, the fewest
GPUs schedulable (Ready, uncordoned, in no window) and the most nodes of one rack down at once
(`GpuWatch`: the demo policy's floor and rack limit, seen from outside noderoll). `render_live` draws a snapshot; `change_lines`
gives one line per change between two, so CI logs stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from api import keys
from api.enums import NodeStatus, State
from api.quantity import parse_quantity
from cli.fleet_summary import disruptions_text, plural
from cli.ops_client import NodeRow
from cli.progress_view import (
    STATE_STYLE,
    ZONE_LABEL,
    batch_text,
    count,
    entry_cell,
    entry_text,
    node_flags,
    phase_text,
)
from planning.rollout.disruption import describe, noun
from planning.views.fleet_status import FleetProgress, NodeProgress
from planning.views.status import RolloutProgress
from protocol import names

# Node states in the fleet's progress that mean "not reached by a window yet".
_NOT_REACHED = {State.WAITING.value, State.BLOCKED.value}
GPU = "nvidia.com/gpu"


@dataclass
class GpuWatch:
    """The GPU floor and the rack limit as the Nodes show them, over every snapshot the demo took."""

    rack_label: str = ""
    # The policy's rack limit (0: none).
    rack_max: int = 0
    # Fewest GPUs on Ready, uncordoned nodes in no window seen (None before the first snapshot), and the total.
    lowest: int | None = None
    total: int = 0
    # Most nodes of one rack down (in a window, cordoned or NotReady) at once.
    rack_peak: int = 0

    def note(self, nodes: list[NodeRow]) -> None:
        """Take one snapshot of the Nodes into account."""
        up, total, down = 0, 0, {}
        for node in nodes:
            gpus = _units(node.allocatable.get(GPU, "0"))
            total += gpus
            out = node.cordoned or not node.ready or node.status == NodeStatus.IN_PROGRESS.value
            if not out:
                up += gpus
            elif self.rack_label:
                rack = node.labels.get(self.rack_label, "")
                down[rack] = down.get(rack, 0) + 1
        if nodes:
            self.total = total
            self.lowest = up if self.lowest is None else min(self.lowest, up)
            self.rack_peak = max([self.rack_peak, *down.values()])


def _units(quantity: str) -> int:
    try:
        return int(parse_quantity(quantity))
    except ValueError:
        return 0


@dataclass
class LiveSnapshot:
    """What the demo shows at one moment."""

    fleet: str = ""
    # The fleet's answer; None when it did not answer this time.
    progress: FleetProgress | None = None
    packages: dict[str, RolloutProgress] = field(default_factory=dict)
    nodes: list[NodeRow] = field(default_factory=list)
    elapsed: float = 0.0
    # Word for the merged interrupt in the disruption lines ("reboot" in the demo).
    interrupt: str = "interrupt"
    # node -> (wave, batch) in which the node was first seen in a window.
    batches: dict[str, tuple[int, int]] = field(default_factory=dict)
    # node -> every boot id seen, in order.
    boot_ids: dict[str, list[str]] = field(default_factory=dict)
    gpus: GpuWatch = field(default_factory=GpuWatch)

    def reboots_seen(self) -> dict[str, int]:
        """node -> boot id changes seen while the demo watched."""
        return {node: len(ids) - 1 for node, ids in self.boot_ids.items()}


def observe(snapshot: LiveSnapshot) -> None:
    """Record each newly reached node under the fleet's current (wave, batch), and new boot ids."""
    progress = snapshot.progress
    snapshot.gpus.note(snapshot.nodes)
    for node in snapshot.nodes:
        ids = snapshot.boot_ids.setdefault(node.name, [])
        if node.boot_id and (not ids or ids[-1] != node.boot_id):
            ids.append(node.boot_id)
        if progress is None or node.name in snapshot.batches:
            continue
        reported = progress.nodes.get(node.name)
        if reported is not None and (reported.state not in _NOT_REACHED or reported.windows):
            snapshot.batches[node.name] = (progress.wave, max(progress.batch_number, 1))


def _batch_lines(snapshot: LiveSnapshot) -> list[Text]:
    states = {n: p.state for n, p in (snapshot.progress.nodes.items() if snapshot.progress else ())}
    waves = {wave for wave, _ in snapshot.batches.values()}
    grouped: dict[tuple[int, int], list[str]] = {}
    for node, key in sorted(snapshot.batches.items()):
        grouped.setdefault(key, []).append(node)
    lines = []
    for (wave, number), members in sorted(grouped.items()):
        prefix = f"wave {wave} " if len(waves) > 1 else ""
        line = Text(f"    {prefix}batch {number}: ")
        for node in members:
            line.append(f"{node} ", style=STATE_STYLE.get(states.get(node, State.WAITING.value), ""))
        lines.append(line)
    return lines


def fleet_line(snapshot: LiveSnapshot) -> str:
    """`fleet/x: phase Progressing, wave 1, batch #3 (4 node(s)), canary Passed, 10/24 nodes complete`."""
    p = snapshot.progress
    head = names.fleet_workflow_id(snapshot.fleet)
    if p is None:
        return f"{head}: no answer yet"
    return (f"{head}: phase {p.phase.value}, wave {p.wave}, batch {batch_text(p.batch_number, p.batch_size)}, "
            f"canary {p.canary_phase}, {count(p.counts, State.COMPLETE)}/{p.total_nodes} nodes complete")


def _flags(node: NodeRow) -> str:
    """The node's flags, and `upcoming` while drain-ahead marks it."""
    flags = node_flags(node)
    return f"{flags}, upcoming" if node.labels.get(keys.UPCOMING_KEY) == keys.UPCOMING_VALUE else flags


def budget_line(snapshot: LiveSnapshot) -> str:
    """`GPUs: 160 of 192 available (floor 154); waiting: ...`: the fleet's floors and why it holds nodes back."""
    p = snapshot.progress
    if p is None or not (p.capacity or p.waits):
        return ""
    floors = "; ".join(f"{noun(c.resource)}: {c.available:,} of {c.total:,} available with the batch out "
                       f"(floor {c.floor:,})" for c in p.capacity)
    return "; ".join(filter(None, [floors, describe(p.waits)]))


def _node_disruption(progress: NodeProgress | None, interrupt: str) -> str:
    if progress is None or not progress.windows:
        return "-"
    return f"{plural(progress.drains, 'drain')}, {plural(progress.interrupts, interrupt)}"


def render_live(snapshot: LiveSnapshot) -> Group:
    """The live display: the fleet and its batches, each Package, disruptions, a node-by-package grid."""
    p = snapshot.progress
    parts: list[RenderableType] = [Text(f"noderoll demo — {snapshot.elapsed:.0f}s", style="bold")]
    header = Text(f"  {names.fleet_workflow_id(snapshot.fleet)}: ")
    if p is None:
        header.append("no answer yet", style="yellow")
    else:
        header.append_text(phase_text(p.phase))
        header.append(f"  wave {p.wave}, batch {batch_text(p.batch_number, p.batch_size)}, canary {p.canary_phase}, "
                      f"{count(p.counts, State.COMPLETE)}/{p.total_nodes} nodes complete")
    parts.append(header)
    if budget_line(snapshot):
        parts.append(Text(f"  {budget_line(snapshot)}", style="cyan"))
    parts.extend(_batch_lines(snapshot))
    for package, progress in sorted(snapshot.packages.items()):
        line = Text(f"  {package} {progress.version}: ")
        line.append_text(phase_text(progress.phase))
        line.append(f"  {count(progress.counts, State.COMPLETE)}/{progress.total_nodes} complete")
        if progress.erroring:
            line.append(f", {len(progress.erroring)} erroring", style="red")
        parts.append(line)
    if p is not None:
        parts.append(Text(f"  disruptions: {disruptions_text(p.nodes, snapshot.interrupt)}"))
    grid = Table(box=None, padding=(0, 1), show_edge=False)
    rack = snapshot.gpus.rack_label
    for column in ("NODE", "ZONE", *(["RACK"] if rack else []), "NODE STATE", *sorted(snapshot.packages), "DISRUPTIONS"):
        grid.add_column(column)
    for node in snapshot.nodes:
        reported = p.nodes.get(node.name) if p else None
        grid.add_row(node.name, node.labels.get(ZONE_LABEL, "-"), *([node.labels.get(rack, "-")] if rack else []),
                     _flags(node),
                     *(entry_cell(node, node.packages.get(name)) for name in sorted(snapshot.packages)),
                     _node_disruption(reported, snapshot.interrupt))
    parts.append(grid)
    return Group(*parts)


def _fleet_key(p: FleetProgress | None) -> tuple[object, ...]:
    return () if p is None else (p.phase, p.wave, p.batch_number, p.canary_phase)


def change_lines(before: LiveSnapshot | None, after: LiveSnapshot) -> list[str]:
    """One line per change between two snapshots (the display without a terminal)."""
    lines: list[str] = []
    stamp = f"[{after.elapsed:6.1f}s]"
    if before is None or _fleet_key(before.progress) != _fleet_key(after.progress):
        lines.append(f"{stamp} {fleet_line(after)}")
    if budget_line(after) and (before is None or budget_line(before) != budget_line(after)):
        lines.append(f"{stamp} {budget_line(after)}")
    old_packages = before.packages if before else {}
    for package, p in sorted(after.packages.items()):
        old = old_packages.get(package)
        if old is None or old.phase != p.phase:
            lines.append(f"{stamp} {package}: phase {p.phase.value}, "
                         f"{count(p.counts, State.COMPLETE)}/{p.total_nodes} complete")
    old_nodes = {n.name: n for n in before.nodes} if before else {}
    old_reports = before.progress.nodes if before and before.progress else {}
    reports = after.progress.nodes if after.progress else {}
    for node in after.nodes:
        old_node = old_nodes.get(node.name)
        if old_node is not None and _flags(old_node) != _flags(node):
            lines.append(f"{stamp} {node.name}: {_flags(node)}")
        for package in sorted(after.packages):
            entry = node.packages.get(package)
            old_entry = old_node.packages.get(package) if old_node else None
            if entry is not None and entry_text(node, entry) != entry_text(old_node, old_entry):
                lines.append(f"{stamp} {node.name} {package}: {entry_text(node, entry)}")
        now, then = reports.get(node.name), old_reports.get(node.name)
        if now is not None and now.windows and (then is None or then.windows != now.windows):
            lines.append(f"{stamp} {node.name}: window {now.windows} done, "
                         f"{_node_disruption(now, after.interrupt)} so far")
    return lines
