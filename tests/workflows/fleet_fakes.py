"""Fake activities for fleet workflow tests, registered under the real names.

`FakeNodes` plays the Kubernetes listing and the node workflows: `list_fleet_nodes` runs the real
target selection (`planning.rollout.fleet_targets.select_fleet`) over fake Nodes whose state annotation
the fake keeps; `request_windows` records every request and, for nodes in `auto`, answers at once
as a node workflow would: every Package complete (recorded on the fake node at its version and
config), or erroring for nodes in `fail` (and, on any node, for Packages of a version in
`fail_versions`); the test answers other nodes itself with `finish`. As the real activity,
`list_fleet_nodes` also returns the marks the blocked nodes do not show yet
(`planning.node.node_marks.listing_marks`), and `mark_blocked_nodes` writes them as the real one decides
(`decide_mark`) on the fake Node's label and StateMalformed condition, recording each mark written.
`mark_upcoming_nodes` keeps drain-ahead's claims per node (`planning.rollout.drain_ahead.owners_after`) and puts
the label and taint on the fake Node; `events` orders every claim, release and request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import TypeAdapter
from temporalio import activity
from temporalio.client import Client

from api.keys import UPCOMING_KEY, UPCOMING_TAINT_EFFECT, UPCOMING_VALUE
from api.node_state import config_hashes
from api.package import PackageSpec
from planning.node.node_marks import NodeMark, decide_mark, listing_marks
from planning.node.targets import NodeView
from planning.rollout.drain_ahead import owners_after
from planning.rollout.fleet_targets import (
    FleetPackage,
    FleetQuery,
    FleetSelection,
    down_reason,
    select_fleet,
    supply_read,
    units,
)
from protocol.activities import (
    DescribeWorkflowRunsInput,
    DescribeWorkflowRunsResult,
    ListFleetNodesInput,
    ListFleetNodesResult,
    MarkBlockedNodesInput,
    MarkBlockedNodesResult,
    MarkUpcomingNodesInput,
    MarkUpcomingNodesResult,
    NodeAvailability,
    ReadNodeSupplyInput,
    ReadNodeSupplyResult,
    RequestWindowsInput,
)
from protocol.activity_refs import (
    DESCRIBE_WORKFLOW_RUNS,
    LIST_FLEET_NODES,
    MARK_BLOCKED_NODES,
    MARK_UPCOMING_NODES,
    READ_NODE_SUPPLY,
    REQUEST_WINDOWS,
)
from protocol.fleet import PackageOutcome, WindowRequest, WindowResult
from protocol.names import SIGNAL_WINDOW_RESULT

_SELECTION = TypeAdapter(FleetSelection)
_MARKS = TypeAdapter(list[NodeMark])


@dataclass
class FakeNode:
    """A Node: labels, taints and the packages recorded complete on it (name -> (version, config))."""

    name: str
    labels: dict[str, str] = field(default_factory=lambda: {"pool": "gpu"})
    taints: list[dict[str, str]] = field(default_factory=list)
    recorded: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    garbage: str = ""
    # What the Node shows: the `noderoll.io/status` label and the StateMalformed condition.
    status_label: str = ""
    state_malformed: bool = False
    # What capacity floors and topology limits read: Ready, cordoned, allocatable.
    ready: bool = True
    unschedulable: bool = False
    allocatable: dict[str, str] = field(default_factory=dict)

    def view(self) -> NodeView:
        packages = {name: {"version": version, "state": "complete", "stage": "config", "config": config}
                    for name, (version, config) in self.recorded.items()}
        state = self.garbage or json.dumps({"packages": packages})
        return NodeView(self.name, self.labels, self.taints, state, self.status_label, self.state_malformed,
                        self.ready, self.unschedulable, self.allocatable)


@dataclass
class FakeNodes:
    """Nodes to list and the behaviour of their (fake) node workflows."""

    nodes: dict[str, FakeNode] = field(default_factory=dict)
    auto: bool = True
    fail: set[str] = field(default_factory=set)
    # Package versions whose windows fail on every node (as a fleetsim fault with `version`).
    fail_versions: set[str] = field(default_factory=set)
    # Packages that ask for a reboot: a window carrying one counts an interrupt and a drain.
    reboot: set[str] = field(default_factory=set)
    requests: list[tuple[str, WindowRequest]] = field(default_factory=list)
    outstanding: dict[str, WindowRequest] = field(default_factory=dict)
    # Node workflows that are "closed" (for the watchdog's describe).
    closed: set[str] = field(default_factory=set)
    listings: int = 0
    # Fresh reads before hand-outs (`read_node_supply`).
    supply_reads: int = 0
    # Every mark `mark_blocked_nodes` wrote, in order.
    marks: list[NodeMark] = field(default_factory=list)
    # Drain-ahead: node -> its `noderoll.io/upcoming-for` annotation; ("mark" | "unmark" | "request", node) in order.
    upcoming: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, count: int, prefix: str = "n", **kwargs: object) -> FakeNodes:
        nodes = {f"{prefix}{i:02d}": FakeNode(f"{prefix}{i:02d}") for i in range(count)}
        return cls(nodes=nodes, **kwargs)  # type: ignore[arg-type]

    def activities(self) -> list[object]:
        @activity.defn(name=LIST_FLEET_NODES.name)
        async def list_fleet_nodes(input: ListFleetNodesInput) -> ListFleetNodesResult:
            self.listings += 1
            packages = {e.name: FleetPackage(PackageSpec.model_validate(e.spec), e.uninstall, e.paused)
                        for e in input.packages}
            views = [n.view() for n in self.nodes.values()]
            in_flight = {n: frozenset(p) for n, p in input.in_flight.items()}
            selection = select_fleet(FleetQuery(packages, views, in_flight, frozenset(input.label_keys),
                                                input.supply, frozenset(input.resources)))
            blocked = {name: "; ".join(f"{p}: {r}" for p, r in sorted(t.blocked.items()))
                       for name, t in selection.nodes.items() if t.blocked and not t.eligible}
            marks = listing_marks([v for v in views if v.name in selection.nodes], blocked)
            return ListFleetNodesResult(_SELECTION.dump_python(selection, mode="json", exclude_defaults=True), len(views),
                                        _MARKS.dump_python(marks, mode="json"))

        @activity.defn(name=MARK_BLOCKED_NODES.name)
        async def mark_blocked_nodes(input: MarkBlockedNodesInput) -> MarkBlockedNodesResult:
            written = []
            for mark in _MARKS.validate_python(input.marks):
                node = self.nodes[mark.node]
                write = decide_mark(mark, node.view())
                if write is None:
                    continue
                if write.set_label:
                    node.status_label = write.label or ""
                if write.malformed is not None:
                    node.state_malformed = write.malformed
                self.marks.append(mark)
                written.append(mark.node)
            return MarkBlockedNodesResult(written)

        @activity.defn(name=MARK_UPCOMING_NODES.name)
        async def mark_upcoming_nodes(input: MarkUpcomingNodesInput) -> MarkUpcomingNodesResult:
            result = MarkUpcomingNodesResult()
            for node, want in [*((n, False) for n in input.unmark), *((n, True) for n in input.mark)]:
                if node not in self.nodes:
                    continue
                marks = owners_after(self.upcoming.get(node, ""), input.fleet, want, input.taint)
                self.upcoming[node] = marks.annotation() or ""
                fake = self.nodes[node]
                fake.labels.pop(UPCOMING_KEY, None)
                fake.taints = [t for t in fake.taints if t.get("key") != UPCOMING_KEY]
                if marks.label:
                    fake.labels[UPCOMING_KEY] = UPCOMING_VALUE
                if marks.taint:
                    fake.taints.append({"key": UPCOMING_KEY, "value": "", "effect": UPCOMING_TAINT_EFFECT})
                self.events.append(("mark" if want else "unmark", node))
                (result.marked if want else result.unmarked).append(node)
            return result

        @activity.defn(name=REQUEST_WINDOWS.name)
        async def request_windows(input: RequestWindowsInput) -> None:
            for node, request in zip(input.nodes, input.requests, strict=True):
                self.events.append(("request", node))
                self.requests.append((node, request))
                self.outstanding[node] = request
                if self.auto:
                    await self.finish_one(activity.client(), node)

        @activity.defn(name=READ_NODE_SUPPLY.name)
        async def read_node_supply(input: ReadNodeSupplyInput) -> ReadNodeSupplyResult:
            self.supply_reads += 1
            views = supply_read([n.view() for n in self.nodes.values()], input.nodes, input.down_only)
            return ReadNodeSupplyResult({v.name: NodeAvailability(down_reason(v), units(v, input.resources),
                                                                  {k: v.labels[k] for k in input.label_keys
                                                                   if k in v.labels})
                                         for v in views})

        @activity.defn(name=DESCRIBE_WORKFLOW_RUNS.name)
        async def describe_workflow_runs(input: DescribeWorkflowRunsInput) -> DescribeWorkflowRunsResult:
            closed = [w for w in input.workflow_ids if w.removeprefix("node/") in self.closed]
            return DescribeWorkflowRunsResult(closed=closed, statuses=dict.fromkeys(closed, "TERMINATED"))

        return [list_fleet_nodes, read_node_supply, request_windows, describe_workflow_runs, mark_blocked_nodes,
                mark_upcoming_nodes]

    def marked(self) -> list[str]:
        """Nodes carrying the `noderoll.io/upcoming` label now."""
        return sorted(n for n, node in self.nodes.items() if node.labels.get(UPCOMING_KEY) == UPCOMING_VALUE)

    def requested(self) -> list[str]:
        return [node for node, _ in self.requests]

    def carried(self, node: str) -> list[list[str]]:
        """The Packages of each request `node` got, in order."""
        return [sorted(o.name for o in r.packages) for n, r in self.requests if n == node]

    async def finish_one(self, client: Client, node: str) -> None:
        """Answer `node`'s outstanding request as its node workflow would."""
        request = self.outstanding.pop(node)
        failed = node in self.fail or any(str(o.spec.get("version")) in self.fail_versions for o in request.packages)
        outcomes = {}
        for order in request.packages:
            version = str(order.spec.get("version", ""))
            if node in self.fail or version in self.fail_versions:
                outcomes[order.name] = PackageOutcome("erroring", version, "apply", "apply failed: exit 7")
                continue
            if order.uninstall:
                self.nodes[node].recorded.pop(order.name, None)
            else:
                self.nodes[node].recorded[order.name] = (version, config_hashes(order.spec.get("config") or {}))
            outcomes[order.name] = PackageOutcome("complete", version, "config", "complete")
        reboot = any(o.name in self.reboot for o in request.packages) and not failed
        result = WindowResult(node, request.request_id, outcomes, cordoned=reboot, drained=reboot,
                              interrupt="reboot" if reboot else "")
        await client.get_workflow_handle(request.fleet_workflow_id).signal(SIGNAL_WINDOW_RESULT, result)

    async def finish(self, client: Client) -> list[str]:
        """Answer every outstanding request."""
        done = sorted(self.outstanding)
        for node in done:
            await self.finish_one(client, node)
        return done
