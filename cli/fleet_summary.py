"""A fleet's disruptions and skipped nodes, as `noderoll status` and the demo show them. Pure.

From nodes (`disruptions_text`, `skipped_text`, `disruption_totals`), and from a fleet's `progress` summary: its
answer lists no node unless asked (issue 45); it sums its windows' disruptions (`FleetProgress.disruptions`) and
says how many nodes had each count (`disruption_nodes`); `fleet_disruptions_text` and `fleet_skipped_text`
render those, or the nodes when an answer lists them (a fleet from before issue 45, or one asked for its nodes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from planning.views.fleet_status import FleetProgress, NodeProgress


def plural(n: int, word: str) -> str:
    """`1 drain`, `2 drains`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def disruptions_text(nodes: Mapping[str, NodeProgress], interrupt: str = "interrupt") -> str:
    """What the fleet's windows did to its nodes, grouped: `24 nodes, 1 drain and 1 reboot each`.

    `interrupt` names the interrupt (the demo says `reboot` when that is what its Packages merge to).
    """
    if not nodes:
        return "no nodes"
    groups = Counter((p.drains, p.interrupts) for p in nodes.values())
    parts = []
    # Most common first; nodes not disrupted last.
    for (drains, interrupts), n in sorted(groups.items(), key=lambda kv: (kv[0] == (0, 0), -kv[1], kv[0])):
        if not drains and not interrupts:
            parts.append(f"{plural(n, 'node')} not disrupted")
            continue
        each = " and ".join(x for x in (drains and plural(drains, "drain"), interrupts and plural(interrupts, interrupt))
                            if x)
        parts.append(f"{plural(n, 'node')}, {each}" + (" each" if n > 1 else ""))
    return "; ".join(parts)


def skipped_text(nodes: Mapping[str, NodeProgress], shown: int = 5) -> str:
    """`skipped: 2 node(s) whose drain timed out: a, b (noderoll retry --nodes NODE)`; "" when none."""
    names = sorted(n for n, p in nodes.items() if p.skipped)
    if not names:
        return ""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return (f"skipped: {len(names)} node(s) whose drain timed out: {', '.join(names[:shown])}{more} "
            "(noderoll retry --nodes NODE)")


def disruption_totals(nodes: Mapping[str, NodeProgress]) -> dict[str, int]:
    """Windows, cordons, drains and interrupts summed over the nodes."""
    return {key: sum(getattr(p, key) for p in nodes.values()) for key in ("windows", "cordons", "drains", "interrupts")}


def fleet_disruptions(progress: FleetProgress) -> dict[str, int]:
    """The fleet's disruptions summed: as its answer sums them, or over the nodes it listed (a fleet from before
    issue 45 answers every node and no sum)."""
    return dict(progress.disruptions) if progress.disruption_nodes else disruption_totals(progress.nodes)


def fleet_disruptions_text(progress: FleetProgress, interrupt: str = "interrupt") -> str:
    """`disruptions_text` of the fleet: from its listed nodes, else from how many nodes had each count
    (`24 nodes, 1 drain and 1 reboot each` when every node disrupted had the same)."""
    if not progress.disruption_nodes:
        return disruptions_text(progress.nodes, interrupt)
    drains = {int(k): v for k, v in progress.disruption_nodes.get("drains", {}).items()}
    interrupts = {int(k): v for k, v in progress.disruption_nodes.get("interrupts", {}).items()}
    touched = {k: v for k, v in drains.items() if k}, {k: v for k, v in interrupts.items() if k}
    spared = progress.total_nodes - max(sum(touched[0].values()), sum(touched[1].values()))
    if not any(touched):
        return f"{plural(progress.total_nodes, 'node')} not disrupted" if progress.total_nodes else "no nodes"
    if all(len(t) <= 1 for t in touched) and len({sum(t.values()) for t in touched if t}) == 1:
        n = sum(next(t for t in touched if t).values())
        each = " and ".join(plural(next(iter(t)), word) for t, word in zip(touched, ("drain", interrupt), strict=True)
                            if t)
        text = f"{plural(n, 'node')}, {each}" + (" each" if n > 1 else "")
    else:
        text = "; ".join(f"{word}s per node " + " ".join(f"{k}×{v}" for k, v in sorted(t.items()))
                         for t, word in zip(touched, ("drain", interrupt), strict=True) if t)
    return text + (f"; {plural(spared, 'node')} not disrupted" if spared > 0 else "")


def fleet_skipped_text(progress: FleetProgress, shown: int = 5) -> str:
    """`skipped_text` of the fleet: from its listed nodes, else from its Packages' skipped nodes."""
    if progress.nodes:
        return skipped_text(progress.nodes, shown)
    names = sorted({n for p in progress.packages.values() for n in p.skipped})
    total = max([len(names), *(p.skipped_count for p in progress.packages.values())])
    if not total:
        return ""
    more = f" and {total - min(shown, len(names))} more" if total > min(shown, len(names)) else ""
    return (f"skipped: {total} node(s) whose drain timed out: {', '.join(names[:shown])}{more} "
            "(noderoll retry --nodes NODE)")
