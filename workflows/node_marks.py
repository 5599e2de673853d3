"""Call site of `mark_blocked_nodes` for rollouts and node workflows. Deterministic, no I/O.

`mark_listed(nodes, selection)`: after a listing, show on the nodes that the selection blocked what
they do not show yet (`planning.node_marks.listing_marks`; no activity at all when there is
nothing to show). `mark_nodes(marks)`: the same for marks made by the caller (the node workflow
holding its own node). A failed mark is logged, never fatal: the next listing asks again, and the
Package status names the node either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.io import MarkBlockedNodesInput, MarkBlockedNodesResult
    from planning.node_marks import NodeMark, listing_marks
    from planning.targets import NodeView, TargetSelection
    from workflows.api_retries import outlasting

MARK_TIMEOUT = timedelta(minutes=2)
# Marks are retried through an apiserver outage like the window's calls (`workflows.api_retries`).
MARK_RETRY = outlasting(timedelta(seconds=2), timedelta(seconds=30))


async def mark_nodes(marks: Sequence[NodeMark]) -> None:
    """Run `mark_blocked_nodes` for `marks` (none: no activity)."""
    if not marks:
        return
    try:
        await workflow.execute_activity(
            "mark_blocked_nodes", MarkBlockedNodesInput(list(marks)), result_type=MarkBlockedNodesResult,
            start_to_close_timeout=MARK_TIMEOUT, heartbeat_timeout=timedelta(seconds=60), retry_policy=MARK_RETRY,
            summary=f"mark {len(marks)} blocked node(s)")
    except ActivityError as err:
        workflow.logger.warning("marking %d node(s) failed: %s", len(marks), err)


async def mark_listed(nodes: Sequence[NodeView], selection: TargetSelection) -> None:
    """Show on the listed nodes what the selection found and they do not show yet."""
    await mark_nodes(listing_marks(nodes, selection))
