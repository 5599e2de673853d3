"""The fleet's side effects: classify the Nodes for its Packages, hand windows to node workflows. Does I/O.

* `list_fleet_nodes` lists Nodes (paged, read only) and runs the pure target selection
  (`planning.fleet_targets.select_fleet`) here, in the activity, so the fleet's history records a
  compact per-node summary (pending, done, blocked, waiting Packages; compartment labels; a
  fingerprint) instead of every Node's labels and state annotation; with it the marks that nodes
  no window can update do not show yet (`planning.node_marks.listing_marks`), which the fleet has
  written by `mark_blocked_nodes`.
* `request_windows` does what a workflow cannot: signal-with-start `node/<node>` with signal
  `window`, `HAND_OVER_CONCURRENCY` at a time. Idempotent: the node workflow drops a request id it
  has seen, so a retried activity (some nodes asked, one call failed) asks the others again harmlessly.
"""

from __future__ import annotations

import asyncio

from pydantic import TypeAdapter
from temporalio import activity

from activities.node_requests import node_workflow_input
from activities.targets import list_node_snapshots
from api.package import PackageSpec
from planning.fleet_targets import FleetPackage, FleetQuery, FleetSelection, select_fleet
from planning.node_marks import NodeMark, listing_marks
from planning.targets import NodeView, TargetSelection
from protocol.activities import ListFleetNodesInput, ListFleetNodesResult, RequestWindowsInput
from protocol.names import NODE_WORKFLOW_TYPE, SIGNAL_WINDOW, node_workflow_id

_SELECTION = TypeAdapter(FleetSelection)
# Signal-with-start calls in flight at once per `request_windows`. One call is a round trip to the
# Temporal frontend (and a history write there); made one after the other, a batch of 50 nodes
# waited for 50 round trips before its last node could start its window (issue 14: the hand-over
# was the serial part of a batch). A handful at once keeps the frontend's load bounded.
HAND_OVER_CONCURRENCY = 8
_MARKS = TypeAdapter(list[NodeMark])


@activity.defn(name="list_fleet_nodes")
def list_fleet_nodes(input: ListFleetNodesInput) -> ListFleetNodesResult:
    """Every Node that a Package of the fleet targets, classified per Package (module docstring)."""
    packages = {
        e.name: FleetPackage(PackageSpec.model_validate(e.spec), uninstall=e.uninstall, paused=e.paused)
        for e in input.packages
    }
    snapshots = list_node_snapshots(input.label_selector)
    views = [NodeView(n.name, n.labels, n.taints, n.state_annotation, n.status_label, n.state_malformed)
             for n in snapshots]
    in_flight = {node: frozenset(names) for node, names in input.in_flight.items()}
    selection = select_fleet(FleetQuery(packages, views, in_flight, frozenset(input.label_keys)))
    # What the blocked nodes do not show yet (label, StateMalformed): the fleet has it marked.
    blocked = {name: "; ".join(f"{p}: {r}" for p, r in sorted(t.blocked.items()))
               for name, t in selection.nodes.items() if t.blocked and not t.eligible}
    marks = listing_marks([v for v in views if v.name in selection.nodes], TargetSelection(blocked=blocked))
    return ListFleetNodesResult(
        selection=_SELECTION.dump_python(selection, mode="json"), listed=len(views),
        marks=_MARKS.dump_python(marks, mode="json"))


@activity.defn(name="request_windows")
async def request_windows(input: RequestWindowsInput) -> None:
    """Signal-with-start `node/<node>` with each request, `HAND_OVER_CONCURRENCY` at a time (heartbeats per node)."""
    client = activity.client()
    task_queue = input.task_queue or activity.info().task_queue
    slots = asyncio.Semaphore(HAND_OVER_CONCURRENCY)

    async def hand_over(node: str, request: object) -> None:
        async with slots:
            await client.start_workflow(
                NODE_WORKFLOW_TYPE,
                node_workflow_input(node),
                id=node_workflow_id(node),
                task_queue=task_queue,
                start_signal=SIGNAL_WINDOW,
                start_signal_args=[request],
                static_summary=f"node {node}",
            )
        activity.heartbeat(node)

    # A failed call cancels the others and fails the activity with that call's own error (not the
    # group's "unhandled errors in a TaskGroup"), so the Temporal UI names it; the retry asks again.
    try:
        async with asyncio.TaskGroup() as group:
            for node, request in zip(input.nodes, input.requests, strict=True):
                group.create_task(hand_over(node, request))
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
