"""Call site of `mark_blocked_nodes` for fleets and node workflows. Deterministic, no I/O.

`mark_nodes(marks)`: show on the nodes what the marks say (no activity at all when there is nothing
to show): the marks a fleet's listing returned (`planning.node.node_marks.listing_marks`, decided in the
activity `list_fleet_nodes`; the fleet machine asks with `MarkBlocked`) and the mark of a node workflow
holding its own node. A failed mark is logged, never fatal: the next listing asks again, and the Package
status names the node either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from planning.fleet.codec import marks_to_json
    from planning.node.node_marks import NodeMark
    from protocol.activities import MarkBlockedNodesInput, MarkBlockedNodesResult
    from protocol.activity_refs import MARK_BLOCKED_NODES
    from workflows.api_retries import outlasting

MARK_TIMEOUT = timedelta(minutes=2)
# Marks are retried through an apiserver outage like the window's calls (`workflows.api_retries`).
MARK_RETRY = outlasting(timedelta(seconds=2), timedelta(seconds=30))


async def mark_nodes(marks: Sequence[NodeMark]) -> None:
    """Run `mark_blocked_nodes` for `marks` (none: no activity)."""
    if marks:
        await mark_blocked(MarkBlockedNodesInput(marks_to_json(marks)))


async def mark_blocked(input: MarkBlockedNodesInput) -> None:
    """Run `mark_blocked_nodes` with `input`; a failure is logged."""
    try:
        await workflow.execute_activity(
            MARK_BLOCKED_NODES.name, input, result_type=MarkBlockedNodesResult,
            start_to_close_timeout=MARK_TIMEOUT, heartbeat_timeout=timedelta(seconds=60), retry_policy=MARK_RETRY,
            summary=f"mark {len(input.marks)} blocked node(s)")
    except ActivityError as err:
        workflow.logger.warning("marking %d node(s) failed: %s", len(input.marks), err)
