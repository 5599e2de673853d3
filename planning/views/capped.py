"""Lists of nodes with a reason, capped for a status object and a query answer. Pure.

A fleet of 10,000 nodes can have 1,000 of them erroring; listing every one in a Package's status made it
85 KB (etcd refuses objects above 1.5 MB; the issue caps a status at 64 KB) and the `progress` answer grew
with it (issue 45). So wherever nodes are listed with a reason (`blockedNodes`, `erroringNodes` and the
`progress` answer's `blocked` and `erroring`), the nodes are grouped by reason and shown as:

* the first `REASONS_SHOWN` reasons, most nodes first (then by reason), each with its node count
  (`ReasonCount`);
* for each of them, its first `NODES_PER_REASON` nodes by name, each reason cut to `REASON_CHARS`;

with every node counted elsewhere (`nodes.blocked`, `nodes.erroring`, `blocked_count`). At most 10 x 5 = 50
nodes per list: a status stays under 64 KB whatever the fleet's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REASONS_SHOWN = 10
NODES_PER_REASON = 5
REASON_CHARS = 200


@dataclass
class ReasonCount:
    """One reason and how many nodes have it."""

    reason: str = ""
    nodes: int = 0


def cut(reason: str) -> str:
    """`reason` cut to REASON_CHARS (an ellipsis marks a cut)."""
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."


def capped(nodes: Mapping[str, str]) -> tuple[dict[str, str], list[ReasonCount]]:
    """`nodes` (node -> reason) capped (module rules): the nodes shown with their reason, and the reasons
    shown with their node counts."""
    groups: dict[str, list[str]] = {}
    for node, reason in nodes.items():
        groups.setdefault(reason, []).append(node)
    reasons = sorted(groups, key=lambda r: (-len(groups[r]), r))[:REASONS_SHOWN]
    shown = {node: cut(reason) for reason in reasons for node in sorted(groups[reason])[:NODES_PER_REASON]}
    return dict(sorted(shown.items())), [ReasonCount(cut(r), len(groups[r])) for r in reasons]
