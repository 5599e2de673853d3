"""`mark_upcoming_nodes`: drain-ahead's label and taint on the nodes a fleet expects next. Does I/O.

The fleet decides which nodes to claim and release (`planning.rollout.drain_ahead`); this activity writes
each node's claim (`kube.upcoming.set_upcoming`: the annotation `noderoll.io/upcoming-for`, the label
`noderoll.io/upcoming=true`, and the taint `noderoll.io/upcoming:PreferNoSchedule` when asked),
heartbeating per node. Idempotent: a repeated call finds the nodes marked and writes nothing.
"""

from __future__ import annotations

from temporalio import activity

from kube.upcoming import set_upcoming
from protocol.activities import MarkUpcomingNodesInput, MarkUpcomingNodesResult
from protocol.activity_refs import MARK_UPCOMING_NODES


@activity.defn(name=MARK_UPCOMING_NODES.name)
def mark_upcoming_nodes(input: MarkUpcomingNodesInput) -> MarkUpcomingNodesResult:
    """Claim `input.mark` and release `input.unmark` for `input.fleet` (module docstring)."""
    result = MarkUpcomingNodesResult()
    for node in input.unmark:
        if set_upcoming(node, input.fleet, want=False, taint=False):
            result.unmarked.append(node)
        activity.heartbeat(node)
    for node in input.mark:
        if set_upcoming(node, input.fleet, want=True, taint=input.taint):
            result.marked.append(node)
        activity.heartbeat(node)
    return result
