"""The demo's closing summary: each Package, then the fleet and its disruptions per node. Pure.

Two sources are set side by side on purpose: what the fleet reports (its `progress`: windows,
drains and interrupts per node) and what the nodes show independently of that accounting (boot id
changes seen while the demo watched, `Cordoned` Events on the Nodes, interrupts recorded on the hosts).
With one window per node they agree: `24 nodes, 1 drain and 1 reboot each`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from rich.table import Table

from api.enums import State
from cli.fleet_summary import disruption_totals, disruptions_text, plural
from demo.view import GPU, LiveSnapshot
from planning.views.fleet_status import FleetProgress
from planning.views.status import RolloutProgress
from protocol import names


@dataclass
class Outcome:
    """How the watched rollout ended."""

    code: int
    message: str
    snapshot: LiveSnapshot = field(default_factory=LiveSnapshot)
    # package -> seconds from apply to settled
    durations: dict[str, float] = field(default_factory=dict)
    # package -> its progress when it settled (what the summary reports)
    settled: dict[str, RolloutProgress] = field(default_factory=dict)
    # The fleet's last answer (a poll it did not answer keeps the one before).
    fleet: FleetProgress | None = None
    # When the demo applied its objects (Events before it are an earlier demo's).
    started: datetime | None = None
    # The rollout's HTML report (`noderoll report`), "" when it could not be written.
    report: str = ""


@dataclass
class NodeEvidence:
    """What the nodes show, independently of the fleet's accounting (per node)."""

    cordon_events: dict[str, int] = field(default_factory=dict)
    # node -> interrupts the agent recorded on its host
    interrupts: dict[str, int] = field(default_factory=dict)
    # package -> failed stage pods kept (the latest failed attempt per erroring node)
    failed_pods: dict[str, int] = field(default_factory=dict)


def per_node(counts: Mapping[str, int], nodes: list[str]) -> str:
    """`24 in all, 1 on each of 24 nodes`, or `25 in all: 1 on 23 nodes, 2 on 1 node, 0 on 1 node`."""
    histogram = Counter(int(counts.get(n, 0)) for n in nodes)
    total = sum(int(counts.get(n, 0)) for n in nodes)
    if len(histogram) == 1:
        (each, n), = histogram.items()
        return f"{total} in all, {each} on each of {plural(n, 'node')}"
    parts = [f"{each} on {plural(n, 'node')}" for each, n in sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))]
    return f"{total} in all: " + ", ".join(parts)


def packages_summary(outcome: Outcome, evidence: NodeEvidence | None) -> Table:
    """One column per Package: phase, nodes complete, duration, erroring nodes, failed stage pods."""
    # A Package is reported as it was when it settled; one still running, as last seen.
    packages = sorted({**outcome.snapshot.packages, **outcome.settled}.items())
    table = Table(title="noderoll demo summary", title_justify="left")
    table.add_column("")
    for package, _ in packages:
        table.add_column(package, overflow="fold")

    def row(label: str, value: Callable[[str, RolloutProgress], object]) -> None:
        table.add_row(label, *(str(value(name, p)) for name, p in packages))

    def duration(name: str, _: RolloutProgress) -> str:
        seconds = outcome.durations.get(name)
        return f"{seconds:.0f}s" if seconds is not None else "-"

    row("phase", lambda _, p: p.phase.value)
    row("nodes complete", lambda _, p: f"{int(p.counts.get(State.COMPLETE.value, 0))}/{p.total_nodes}")
    row("duration", duration)
    row("erroring nodes", lambda _, p: int(p.counts.get(State.ERRORING.value, 0)))
    row("failed stage pods", lambda name, _: evidence.failed_pods.get(name, 0) if evidence else "-")
    return table


def _batch_sizes(snapshot: LiveSnapshot) -> str:
    sizes = Counter(snapshot.batches.values())
    waves = {wave for wave, _ in sizes}
    return ", ".join(
        (f"w{wave}:" if len(waves) > 1 else "") + str(n) for (wave, _), n in sorted(sizes.items()))


def gpu_rows(snapshot: LiveSnapshot, p: FleetProgress | None) -> list[tuple[str, str]]:
    """The GPU floor and the rack limit as the Nodes showed them while the demo watched (sampled every poll)."""
    watch = snapshot.gpus
    if watch.lowest is None:
        return []
    floor = next((c.floor for c in p.capacity if c.resource == GPU), None) if p else None
    rows = [("GPUs schedulable", f"{watch.lowest} of {watch.total} at the lowest"
             + (f" (floor {floor})" if floor is not None else "") + " (seen on the Nodes)")]
    if watch.rack_label:
        rows.append(("nodes of one rack down", f"{watch.rack_peak} at most"
                     + (f" (max {watch.rack_max})" if watch.rack_max else "") + " (seen on the Nodes)"))
    return rows


def fleet_summary(outcome: Outcome, evidence: NodeEvidence | None) -> Table:
    """The fleet: phase, waves, batches, windows, and disruptions per node from both sources."""
    snapshot, p = outcome.snapshot, outcome.fleet
    nodes = sorted(n.name for n in snapshot.nodes) or sorted(p.nodes if p else ())
    word = snapshot.interrupt
    table = Table(title=f"{names.fleet_workflow_id(snapshot.fleet)} (one rollout for every Package of the policy)",
                  title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", overflow="fold")
    if p is None:
        table.add_row("fleet", "did not answer")
    else:
        table.add_row("fleet phase", p.phase.value)
        table.add_row("waves", str(p.wave))
        table.add_row("batches", f"{p.batch_number} (nodes per batch: {_batch_sizes(snapshot) or '-'})")
        table.add_row("disruptive windows", per_node({n: r.windows for n, r in p.nodes.items()}, nodes))
        table.add_row("disruptions", disruptions_text(p.nodes, word))
        totals = disruption_totals(p.nodes)
        table.add_row("drains", per_node({n: r.drains for n, r in p.nodes.items()}, nodes)
                      + f" (cordons: {totals['cordons']})")
        table.add_row(f"{word}s", per_node({n: r.interrupts for n, r in p.nodes.items()}, nodes))
    table.add_row("boot id changes", per_node(snapshot.reboots_seen(), nodes) + " (seen on the Nodes)")
    for label, text in gpu_rows(snapshot, p):
        table.add_row(label, text)
    if evidence is not None:
        table.add_row("cordon Events", per_node(evidence.cordon_events, nodes) + " (on the Nodes)")
        table.add_row("interrupts recorded", per_node(evidence.interrupts, nodes) + " (on the hosts)")
    return table
