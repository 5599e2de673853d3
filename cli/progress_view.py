"""Rendering of fleets, Packages and nodes for the terminal (rich) and as JSON. Pure.

Every function here takes views already read by `cli.ops_client` / `cli.ops_fleets` and
returns a rich renderable, a JSON-ready dict or text; nothing reads the cluster or the clock.
`noderoll status` is `fleets_status` (a table per fleet: phase, wave, batch, canary, nodes per
state; under it a table of its Packages), `noderoll status PKG` is `package_detail`, `noderoll
nodes` is `nodes_table` (with each fleet's node state and disruptions). The demo's live view is
`demo.view`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from api.enums import RolloutPhase, State
from api.node_state import PackageNodeState
from api.package import Limits
from cli import fleet_summary
from cli.fleet_summary import plural
from cli.ops_client import NodeRow, PackageView
from cli.ops_fleets import QUERY_SOURCE, FleetView
from planning.node.drain import drains_window
from planning.views.eta import Eta, duration_text
from planning.views.fleet_status import NodeProgress
from protocol import names
from protocol.node_settings import (
    DEFAULT_INTERRUPT_TIMEOUT_SECONDS,
    DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS,
    DEFAULT_STAGE_TIMEOUT_SECONDS,
)

ZONE_LABEL = "topology.kubernetes.io/zone"
STATE_STYLE = {
    State.COMPLETE: "green", State.IN_PROGRESS: "yellow", State.ERRORING: "red",
    State.BLOCKED: "magenta", State.WAITING: "dim", State.SKIPPED: "cyan",
}
PHASE_STYLE = {
    RolloutPhase.COMPLETE: "bold green", RolloutPhase.FAILED: "bold red", RolloutPhase.HALTED: "bold red",
    RolloutPhase.INVALID: "bold red", RolloutPhase.PAUSED: "bold yellow", RolloutPhase.CANARY: "bold cyan",
    RolloutPhase.BLOCKED: "bold magenta", RolloutPhase.ROLLING_BACK: "bold yellow", RolloutPhase.ROLLED_BACK: "bold red",
}
COUNT_ORDER = (State.WAITING, State.IN_PROGRESS, State.COMPLETE, State.ERRORING, State.BLOCKED, State.SKIPPED)
COUNT_COLUMNS = (State.WAITING, State.IN_PROGRESS, State.ERRORING, State.BLOCKED)


def count(counts: Mapping[str, int], state: State) -> int:
    """Nodes in `state` in a counts map (api.enums.State value -> nodes)."""
    return int(counts.get(state.value, 0))


def phase_text(phase: RolloutPhase) -> Text:
    """The phase, coloured by how it stands."""
    return Text(phase.value, style=PHASE_STYLE.get(phase, ""))


def batch_text(number: int, size: int) -> str:
    """`#3 (4 node(s))` while a batch is out, `#3` between batches, `-` before the first one."""
    if not number:
        return "-"
    return f"#{number} ({size} node(s))" if size else f"#{number}"


# --- packages ---------------------------------------------------------------------------------


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
    """The JSON of `noderoll status PKG --json` (and of each Package under a fleet)."""
    data = asdict(view.progress)
    data["phase"] = view.progress.phase.value
    data["canary_phase"] = str(view.progress.canary_phase)
    data["drain_blocked"] = [asdict(b) for b in view.drain_blocked]
    extra = {"limits": limits_json(view.limits)} if view.limits is not None else {}
    return {"package": view.name, "fleet": view.fleet, "source": view.source, **data, **extra}


def eta_text(eta: Eta | None) -> str:
    """`2025-01-01T10:42:00+00:00 (in 12m30s, 4 batches)`, or "-" without an estimate."""
    if eta is None or not eta.finish_at:
        return "-"
    batches = "1 batch" if eta.batches_left == 1 else f"{eta.batches_left} batches"
    return f"{eta.finish_at} (in {duration_text(eta.seconds_left)}, {batches})"


def _package_message(view: PackageView) -> str:
    if view.source == QUERY_SOURCE:
        return view.progress.message or ""
    return f"[{view.source}] {view.progress.message or ''}".strip()


def packages_table(views: list[PackageView], title: str | None = None) -> Table:
    """One row per Package: phase, nodes done, counts per state, message (batch and canary are the fleet's)."""
    table = Table(title=title, title_justify="left", show_edge=title is not None)
    for column in ("PACKAGE", "VERSION", "PHASE", "DONE", *(s.value.replace("_", " ").upper() for s in COUNT_COLUMNS),
                   "MESSAGE"):
        table.add_column(column, overflow="fold")
    for view in views:
        p = view.progress
        name = view.name if view.exists else f"{view.name} (deleted)"
        table.add_row(name, p.version or "-", phase_text(p.phase), f"{count(p.counts, State.COMPLETE)}/{p.total_nodes}",
                      *(str(count(p.counts, s)) for s in COUNT_COLUMNS), _package_message(view))
    return table


def package_detail(view: PackageView) -> Group:
    """`noderoll status PACKAGE`: phase, counts per state, batch, canary, blocked and erroring nodes."""
    p = view.progress
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("package", view.name + ("" if view.exists else " (deleted)"))
    head.add_row("fleet", names.fleet_workflow_id(view.fleet))
    head.add_row("version", p.version or "-")
    head.add_row("phase", phase_text(p.phase))
    head.add_row("nodes", f"{count(p.counts, State.COMPLETE)}/{p.total_nodes} complete; " + ", ".join(
        f"{s.value} {count(p.counts, s)}" for s in COUNT_ORDER if count(p.counts, s)))
    head.add_row("batch", batch_text(p.batch_number, p.batch_size) + " (the fleet's)")
    head.add_row("canary", f"{p.canary_phase} {', '.join(p.canary_nodes)}".strip())
    if p.eta is not None and p.eta.finish_at:
        head.add_row("eta", f"{eta_text(p.eta)}; {p.eta.source}; assumes {p.eta.assumes}")
    if p.message:
        head.add_row("message", p.message)
    if view.limits is not None:
        head.add_row("limits", limits_text(view.limits))
    head.add_row("source", view.source)
    parts: list[RenderableType] = [head]
    for title, reasons, total in (("blocked nodes", p.blocked, p.blocked_count),
                                  ("erroring nodes", p.erroring, p.erroring_count)):
        if reasons:
            if total > len(reasons):  # capped: the first nodes of each reason (planning.views.capped)
                title = f"{title} ({len(reasons)} shown of {total}: the first of each reason)"
            table = Table(title=title, title_justify="left")
            table.add_column("NODE")
            table.add_column("REASON", overflow="fold")
            for node, reason in sorted(reasons.items()):
                table.add_row(node, reason or "-")
            parts.append(table)
    if p.skipped:
        table = Table(title="skipped nodes (drain timed out; noderoll retry --nodes NODE asks again)",
                      title_justify="left")
        table.add_column("NODE")
        table.add_column("REASON", overflow="fold")
        for node, reason in sorted(p.skipped.items()):
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


# --- fleets -------------------------------------------------------------------------------------


def fleet_json(view: FleetView) -> dict[str, Any]:
    """The JSON of one fleet in `noderoll status --json` (per-node detail: `noderoll nodes --json`)."""
    data: dict[str, Any] = {"fleet": view.name, "workflow_id": view.workflow_id, "source": view.source,
                            "packages": [progress_json(p) for p in view.packages]}
    p = view.progress
    if p is not None:
        data.update(
            phase=p.phase.value, wave=p.wave, batch_number=p.batch_number, batch_size=p.batch_size,
            canary_phase=str(p.canary_phase), canary_nodes=list(p.canary_nodes), message=p.message,
            total_nodes=p.total_nodes, counts=dict(p.counts), updated_at=p.updated_at,
            disruptions=fleet_summary.fleet_disruptions(p), eta=asdict(p.eta) if p.eta is not None else None,
        )
    return data


def fleet_table(view: FleetView) -> Table:
    """One fleet in one row: phase, wave, batch, canary, nodes per state, message."""
    table = Table(title=view.workflow_id, title_justify="left", title_style="bold")
    for column in ("PHASE", "WAVE", "BATCH", "CANARY", "NODES", *(s.value.replace("_", " ").upper() for s in COUNT_COLUMNS),
                   "ETA", "MESSAGE"):
        table.add_column(column, overflow="fold")
    p = view.progress
    if p is None:
        table.add_row("-", "-", "-", "-", "-", *("-" for _ in COUNT_COLUMNS), "-", Text(view.source, style="yellow"))
        return table
    canary = f"{p.canary_phase} {', '.join(p.canary_nodes)}".strip()
    table.add_row(phase_text(p.phase), str(p.wave), batch_text(p.batch_number, p.batch_size), canary,
                  f"{count(p.counts, State.COMPLETE)}/{p.total_nodes} complete",
                  *(str(count(p.counts, s)) for s in COUNT_COLUMNS), eta_text(p.eta), p.message or "")
    return table


def fleets_status(views: list[FleetView]) -> Group:
    """`noderoll status`: per fleet its table, its disruptions, and under it its Packages."""
    parts: list[RenderableType] = []
    for view in views:
        parts.append(fleet_table(view))
        if view.progress is not None and (view.progress.nodes or view.progress.total_nodes):
            parts.append(Text(f"  disruptions: {fleet_summary.fleet_disruptions_text(view.progress)}", style="dim"))
            if skipped := fleet_summary.fleet_skipped_text(view.progress):
                parts.append(Text(f"  {skipped}", style="magenta"))
        if view.progress is not None and view.progress.eta is not None and view.progress.eta.finish_at:
            eta = view.progress.eta
            parts.append(Text(f"  eta: {eta_text(eta)}; {eta.source}; assumes {eta.assumes}", style="dim"))
        if view.packages:
            parts.append(packages_table(view.packages))
        else:
            parts.append(Text("  no Packages", style="dim"))
        parts.append(Text(""))
    return Group(*parts)


# --- nodes ----------------------------------------------------------------------------------------


DRAIN_STAGE = "drain"


def shown_entry(node: NodeRow, entry: PackageNodeState) -> tuple[str, State, str]:
    """(stage, state, message) of a package on a node as the CLI shows it. Pure.

    The recorded entry, except while the node's drain belongs to the entry's window (the
    `noderoll.io/Draining` condition): stage `drain`, state `blocked` while it waits on someone
    else's pods (else `in_progress`), and the condition's message.
    """
    if drains_window(node.drain, entry) and node.drain is not None:
        return DRAIN_STAGE, State.BLOCKED if node.drain.blocked else State.IN_PROGRESS, node.drain.message
    stage = entry.stage.value if entry.stage is not None else ""
    return stage, entry.state, entry.last_error or ""


def entry_cell(node: NodeRow, entry: PackageNodeState | None) -> Text:
    """`in_progress apply`, `complete`, `blocked drain`: a package on a node in one cell."""
    if entry is None:
        return Text("-", style="dim")
    stage, state, _ = shown_entry(node, entry)
    shown = f" {stage}" if stage and state is not State.COMPLETE else ""
    return Text(f"{state.value}{shown}", style=STATE_STYLE.get(state, ""))


def entry_text(node: NodeRow | None, entry: PackageNodeState | None) -> str:
    """`in_progress (apply)`, `blocked (drain): <blocker>`: a package on a node in a line of text."""
    if entry is None or node is None:
        return "-"
    stage, state, message = shown_entry(node, entry)
    text = f"{state.value}" + (f" ({stage})" if stage else "")
    return text + (f": {message}" if state is State.BLOCKED and message else "")


def node_flags(node: NodeRow) -> str:
    """`Ready`, `NotReady, cordoned (noderoll)`, ..."""
    flags = ["Ready" if node.ready else "NotReady"]
    if node.cordoned:
        flags.append("cordoned" + (" (noderoll)" if node.cordoned_by_noderoll else ""))
    return ", ".join(flags)


def node_disruptions(progress: NodeProgress) -> str:
    """`1 window: 1 drain, 1 interrupt` (what one fleet's disruptive windows did to the node)."""
    if not progress.windows:
        return "none"
    return (f"{plural(progress.windows, 'window')}: {plural(progress.drains, 'drain')}, "
            f"{plural(progress.interrupts, 'interrupt')}")


def _fleet_cells(node: NodeRow) -> tuple[str, Text, str]:
    """FLEET, FLEET STATE, DISRUPTIONS: one line per fleet the node belongs to (why: `noderoll status`)."""
    fleets = sorted(node.fleets.items())
    state = Text()
    for index, (_, p) in enumerate(fleets):
        state.append(("\n" if index else "") + p.state, style=STATE_STYLE.get(p.state, ""))  # StrEnum keys match
    return ("\n".join(f for f, _ in fleets) or "-", state if fleets else Text("-", style="dim"),
            "\n".join(node_disruptions(p) for _, p in fleets) or "-")


def nodes_table(nodes: list[NodeRow]) -> Table:
    """`noderoll nodes`: per node its fleets' state and disruptions, then per package version, stage, state,
    attempts, last error or blocker."""
    table = Table(title="nodes", title_justify="left")
    for column in ("NODE", "STATUS", "NODE STATE", "FLEET", "FLEET STATE", "DISRUPTIONS", "PACKAGE", "VERSION",
                   "STAGE", "STATE", "ATTEMPTS", "LAST ERROR / BLOCKED BY"):
        table.add_column(column, overflow="fold")
    for node in nodes:
        entries = sorted(node.packages.items()) or [("-", None)]
        fleet_cells = _fleet_cells(node)
        for index, (name, entry) in enumerate(entries):
            first = index == 0
            stage, state, message = shown_entry(node, entry) if entry else ("", State.WAITING, "")
            table.add_row(
                node.name if first else "", (node.status or "-") if first else "",
                node_flags(node) if first else "", *(fleet_cells if first else ("", "", "")), name,
                entry.version if entry else "", stage,
                Text(state.value, style=STATE_STYLE.get(state, "")) if entry
                else Text(node.state_problem or "", style="red"),
                str(entry.attempts) if entry else "", message,
            )
    return table


def _shown_json(node: NodeRow, entry: PackageNodeState) -> dict[str, str]:
    stage, state, message = shown_entry(node, entry)
    return {"stage": stage, "state": state.value, "message": message}


def nodes_json(nodes: list[NodeRow]) -> list[dict[str, Any]]:
    """The JSON of `noderoll nodes --json`: the recorded entries, the drain as the table shows it, the fleets."""
    return [
        {
            "node": n.name, "status": n.status, "ready": n.ready, "cordoned": n.cordoned,
            "cordonedByNoderoll": n.cordoned_by_noderoll, "stateProblem": n.state_problem, "bootID": n.boot_id,
            "drain": asdict(n.drain) if n.drain is not None else None,
            "packages": {name: e.model_dump(mode="json", by_alias=True, exclude_none=True)
                         for name, e in sorted(n.packages.items())},
            "shown": {name: _shown_json(n, e) for name, e in sorted(n.packages.items())},
            "fleets": {name: asdict(p) for name, p in sorted(n.fleets.items())},
        }
        for n in nodes
    ]
