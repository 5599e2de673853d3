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
  `units`), so a budget is checked on the nodes as they are then (ADR 0023). A `down_only` read (issue 45)
  reads the nodes to hand out and those the fleet asks about, plus every node cordoned or in a window as the
  apiserver selects them (field selector `spec.unschedulable=true`, label `noderoll.io/status=in-progress`):
  what can take capacity away since the fleet's listing, without reading the 10,000 that did not change.
* `request_windows` does what a workflow cannot: signal-with-start `node/<node>` with signal
  `window`, `activities.node_requests.HAND_OVER_CONCURRENCY` at a time. Idempotent: the node workflow drops a request id it has seen.
"""

from __future__ import annotations

from pydantic import TypeAdapter
from temporalio import activity

from activities.node_requests import signal_node_workflows
from api.enums import NodeStatus
from api.keys import NODE_STATUS_LABEL
from api.package import PackageSpec
from kube.node_maintenance import held_nodes
from kube.node_snapshot import NodeFacts, node_view
from kube.nodes import list_node_facts, read_node_facts
from planning.fleet.codec import selection_to_json
from planning.node.node_marks import NodeMark, listing_marks
from planning.rollout.fleet_targets import (
    FleetPackage,
    FleetQuery,
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

# A `down_only` read: the nodes the apiserver selects as cordoned, or as in a node window; named nodes read one
# by one up to this many, else with a listing.
CORDONED = "spec.unschedulable=true"
IN_WINDOW = f"{NODE_STATUS_LABEL}={NodeStatus.IN_PROGRESS.value}"
READ_ONE_BY_ONE = 100
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
    return ListFleetNodesResult(selection=selection_to_json(selection), listed=len(views),
                                marks=_MARKS.dump_python(marks, mode="json"))


@activity.defn(name=READ_NODE_SUPPLY.name)
def read_node_supply(input: ReadNodeSupplyInput) -> ReadNodeSupplyResult:
    """How each of `input.nodes` stands now for the budgets (module docstring); with `down_only`, also every
    node cordoned or in a window, and no other."""
    keys = set(input.label_keys)
    respect = respect_from_json(input.respect)
    held = held_nodes() if respect is not None and respect.node_maintenance else {}
    if input.down_only:
        # A node a NodeMaintenance holds is read too: it is down for the budgets whatever the apiserver selects.
        facts, wanted = _down_and_named([*input.nodes, *held]), None
    else:
        facts, wanted = list_node_facts("", activity.heartbeat), set(input.nodes)
    result = ReadNodeSupplyResult()
    for fact in facts:
        view = node_view(fact, held.get(fact.name, ""))
        if wanted is None or view.name in wanted:
            result.nodes[view.name] = NodeAvailability(
                down_reason(view, respect), units(view, input.resources),
                {k: v for k, v in view.labels.items() if k in keys})
    return result


def _down_and_named(names: list[str]) -> list[NodeFacts]:
    """Every node cordoned or in a window (the apiserver selects them), and the named ones: one read each, or
    a listing of every node when more are named than READ_ONE_BY_ONE (issue 45: a read is then O(the nodes
    that are down and the batch), not O(the fleet), per hand-out). A node newly held by a respected taint is
    seen only when named (taints cannot be selected): the bridge names the nodes whose availability changed."""
    found = {f.name: f for f in list_node_facts("", activity.heartbeat, field_selector=CORDONED)}
    found.update({f.name: f for f in list_node_facts(IN_WINDOW, activity.heartbeat)})
    wanted = set(names) - set(found)
    if len(wanted) > READ_ONE_BY_ONE:
        found.update({f.name: f for f in list_node_facts("", activity.heartbeat) if f.name in wanted})
    else:
        found.update({f.name: f for f in read_node_facts(wanted, activity.heartbeat)})
    return [found[name] for name in sorted(found)]


@activity.defn(name=REQUEST_WINDOWS.name)
async def request_windows(input: RequestWindowsInput) -> None:
    """Signal-with-start `node/<node>` with each request (heartbeats per node)."""
    await signal_node_workflows(input.nodes, input.requests, input.task_queue, input.cluster)
