"""The fleet's side effects: classify the Nodes for its Packages, hand windows to node workflows. Does I/O.

* `list_fleet_nodes` lists Nodes (paged, read only) and runs the pure target selection
  (`planning.rollout.fleet_targets.select_fleet`) here, in the activity, so the fleet's history records a
  compact per-node summary (pending, done, blocked, waiting Packages; compartment labels; a
  fingerprint; with capacity floors or topology limits, the units of the floors' resources and why
  the node is down; with other maintenance respected (`spec.respect`), why the node is down, a node
  another maintenance holds with that reason: a respected taint, or a NodeMaintenance of another
  requestor, read here when the policy respects them (`kube.node_maintenance`); fields at their
  defaults left out) instead of every Node's labels and state annotation; with it the marks that nodes
  no window can update do not show yet (`planning.node.node_marks.listing_marks`), which the fleet has
  written by `mark_blocked_nodes`.
* `read_node_supply` reads the Nodes again right before the fleet hands out windows: per node of the
  fleet, why it is down and its units of the floors' resources (`planning.rollout.fleet_targets.down_reason`,
  `units`), so a budget is checked on the nodes as they are then (ADR 0023).
* `request_windows` does what a workflow cannot: signal-with-start `node/<node>` with signal
  `window`, `activities.node_requests.HAND_OVER_CONCURRENCY` at a time. Idempotent: the node workflow drops a request id it has seen.
"""

from __future__ import annotations

from pydantic import TypeAdapter
from temporalio import activity

from activities.node_requests import signal_node_workflows
from api.package import PackageSpec
from kube.node_maintenance import held_nodes
from kube.node_snapshot import node_view
from kube.nodes import list_node_facts
from planning.node.node_marks import NodeMark, listing_marks
from planning.rollout.fleet_targets import (
    FleetPackage,
    FleetQuery,
    FleetSelection,
    down_reason,
    select_fleet,
    units,
)
from planning.rollout.respect import respect_from_json
from protocol.activities import (
    ListFleetNodesInput,
    ListFleetNodesResult,
    NodeAvailability,
    ReadNodeSupplyInput,
    ReadNodeSupplyResult,
    RequestWindowsInput,
)
from protocol.activity_refs import LIST_FLEET_NODES, READ_NODE_SUPPLY, REQUEST_WINDOWS

_SELECTION = TypeAdapter(FleetSelection)
_MARKS = TypeAdapter(list[NodeMark])


@activity.defn(name=LIST_FLEET_NODES.name)
def list_fleet_nodes(input: ListFleetNodesInput) -> ListFleetNodesResult:
    """Every Node that a Package of the fleet targets, classified per Package (module docstring)."""
    packages = {
        e.name: FleetPackage(PackageSpec.model_validate(e.spec), uninstall=e.uninstall, paused=e.paused)
        for e in input.packages
    }
    respect = respect_from_json(input.respect)
    held = held_nodes() if respect is not None and respect.node_maintenance else {}
    views = [node_view(n, held.get(n.name, "")) for n in list_node_facts(input.label_selector, activity.heartbeat)]
    in_flight = {node: frozenset(names) for node, names in input.in_flight.items()}
    selection = select_fleet(FleetQuery(packages, views, in_flight, frozenset(input.label_keys), input.supply,
                                        frozenset(input.resources), respect))
    # What the blocked nodes do not show yet (label, StateMalformed): the fleet has it marked.
    blocked = {name: "; ".join(f"{p}: {r}" for p, r in sorted(t.blocked.items()))
               for name, t in selection.nodes.items() if t.blocked and not t.eligible}
    marks = listing_marks([v for v in views if v.name in selection.nodes], blocked)
    return ListFleetNodesResult(
        selection=_SELECTION.dump_python(selection, mode="json", exclude_defaults=True), listed=len(views),
        marks=_MARKS.dump_python(marks, mode="json"))


@activity.defn(name=READ_NODE_SUPPLY.name)
def read_node_supply(input: ReadNodeSupplyInput) -> ReadNodeSupplyResult:
    """How each of `input.nodes` stands now for the budgets (module docstring)."""
    wanted, keys = set(input.nodes), set(input.label_keys)
    respect = respect_from_json(input.respect)
    held = held_nodes() if respect is not None and respect.node_maintenance else {}
    result = ReadNodeSupplyResult()
    for facts in list_node_facts("", activity.heartbeat):
        view = node_view(facts, held.get(facts.name, ""))
        if view.name in wanted:
            result.nodes[view.name] = NodeAvailability(down_reason(view, respect), units(view, input.resources),
                                                       {k: v for k, v in view.labels.items() if k in keys})
    return result



@activity.defn(name=REQUEST_WINDOWS.name)
async def request_windows(input: RequestWindowsInput) -> None:
    """Signal-with-start `node/<node>` with each request (heartbeats per node)."""
    await signal_node_workflows(input.nodes, input.requests, input.task_queue, input.cluster)
