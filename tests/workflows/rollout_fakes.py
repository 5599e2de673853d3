"""Fake activities for rollout workflow tests, registered under the real names.

`FakeFleet` plays the Kubernetes listing and the node workflows: `request_node_windows` records
every request and, for nodes in `auto`, answers at once with `node_result` (erroring for nodes in
`fail`); the test answers the other nodes itself with `answer`. `RebootingFleet.finish` records a
completed Package on its node before answering, as a node workflow does. `mark_blocked_nodes` records the
marks and applies them to the listed nodes as the real activity would (`planning.node_marks`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import Client

from activities.io import (
    ListTargetNodesInput,
    ListTargetNodesResult,
    MarkBlockedNodesInput,
    MarkBlockedNodesResult,
    NodeSnapshot,
    RequestNodeWindowsInput,
)
from api.enums import State
from api.keys import QUERY_PROGRESS
from planning.node_marks import NodeMark, decide_mark
from planning.status import RolloutProgress
from planning.targets import NodeView
from workflows.messages import SIGNAL_NODE_RESULT, NodeRequest, NodeResult


@dataclass
class FakeFleet:
    """Nodes to list and the behaviour of their (fake) node workflows."""

    nodes: list[NodeSnapshot] = field(default_factory=list)
    auto: bool = True
    fail: set[str] = field(default_factory=set)
    requests: list[tuple[str, NodeRequest]] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)
    marks: list[NodeMark] = field(default_factory=list)

    @classmethod
    def of(cls, count: int, prefix: str = "n", **kwargs: object) -> FakeFleet:
        nodes = [NodeSnapshot(name=f"{prefix}{i:02d}", labels={"pool": "gpu"}) for i in range(count)]
        return cls(nodes=nodes, **kwargs)  # type: ignore[arg-type]

    def activities(self) -> list[object]:
        @activity.defn(name="list_target_nodes")
        async def list_target_nodes(input: ListTargetNodesInput) -> ListTargetNodesResult:
            return ListTargetNodesResult(nodes=list(self.nodes))

        @activity.defn(name="request_node_windows")
        async def request_node_windows(input: RequestNodeWindowsInput) -> None:
            self.calls.append(list(input.nodes))
            for node, request in zip(input.nodes, input.requests, strict=True):
                self.requests.append((node, request))
                if self.auto:
                    failed = node in self.fail
                    await answer(activity.client(), node, request, State.ERRORING if failed else State.COMPLETE)

        return [list_target_nodes, request_node_windows, self.mark_activity()]

    def mark_activity(self) -> object:
        @activity.defn(name="mark_blocked_nodes")
        async def mark_blocked_nodes(input: MarkBlockedNodesInput) -> MarkBlockedNodesResult:
            written = []
            for mark in input.marks:
                self.marks.append(mark)
                node = next(n for n in self.nodes if n.name == mark.node)
                view = NodeView(node.name, node.labels, node.taints, node.state_annotation, node.status_label,
                                node.state_malformed)
                write = decide_mark(mark, view)
                if write is None:
                    continue
                if write.set_label:
                    node.status_label = write.label or ""
                if write.malformed is not None:
                    node.state_malformed = write.malformed
                written.append(node.name)
            return MarkBlockedNodesResult(written)

        return mark_blocked_nodes

    def requested(self) -> list[str]:
        return [node for node, _ in self.requests]

    def last_request(self, node: str) -> NodeRequest:
        return [r for n, r in self.requests if n == node][-1]


async def answer(client: Client, node: str, request: NodeRequest, state: State, held: bool = False) -> None:
    """Answer `request` on `node` as its node workflow would (`held`: its state could not be read)."""
    await client.get_workflow_handle(request.rollout_workflow_id).signal(
        SIGNAL_NODE_RESULT,
        NodeResult(
            node=node,
            package=request.package,
            version=str(request.spec.get("version", "")),
            request_id=request.request_id,
            state=state.value,
            message="" if state is State.COMPLETE else "apply failed: exit 7",
            held=held,
        ),
    )


async def progress(client: Client, workflow_id: str) -> RolloutProgress:
    return await client.get_workflow_handle(workflow_id).query(QUERY_PROGRESS, result_type=RolloutProgress)


NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "value": "", "effect": "NoSchedule"}


@dataclass
class RebootingFleet(FakeFleet):
    """A fleet whose nodes reboot in their window: a requested node carries the not-ready taint
    (as the node lifecycle controller sets it) until the test answers its request with `finish`."""

    outstanding: dict[str, NodeRequest] = field(default_factory=dict)
    listings: int = 0

    def activities(self) -> list[object]:
        @activity.defn(name="list_target_nodes")
        async def list_target_nodes(input: ListTargetNodesInput) -> ListTargetNodesResult:
            self.listings += 1
            return ListTargetNodesResult(nodes=[self._snapshot(n) for n in self.nodes])

        @activity.defn(name="request_node_windows")
        async def request_node_windows(input: RequestNodeWindowsInput) -> None:
            self.calls.append(list(input.nodes))
            for node, request in zip(input.nodes, input.requests, strict=True):
                self.requests.append((node, request))
                self.outstanding[node] = request

        return [list_target_nodes, request_node_windows, self.mark_activity()]

    def _snapshot(self, node: NodeSnapshot) -> NodeSnapshot:
        if node.name not in self.outstanding:
            return node
        return NodeSnapshot(name=node.name, labels=node.labels, taints=[*node.taints, NOT_READY_TAINT])

    async def finish(self, client: Client, state: State = State.COMPLETE) -> list[str]:
        """Answer every outstanding request (the windows end, the nodes are Ready again)."""
        done = sorted(self.outstanding)
        for node in done:
            request = self.outstanding[node]
            if state is State.COMPLETE:
                # As a node workflow does: the window's last state write comes before its answer.
                self._record_complete(node, request)
            # Answered first, Ready after: a listing in between still sees the reboot taint.
            await answer(client, node, request, state)
            del self.outstanding[node]
        return done

    def _record_complete(self, node: str, request: NodeRequest) -> None:
        snapshot = next(n for n in self.nodes if n.name == node)
        try:
            recorded = json.loads(snapshot.state_annotation or "{}")
        except json.JSONDecodeError:
            return  # unreadable: a real window holds the node and writes nothing
        if not isinstance(recorded, dict):
            return
        recorded.setdefault("packages", {})[request.package] = {
            "version": str(request.spec.get("version", "")), "image": str(request.spec.get("image", "")),
            "state": State.COMPLETE.value, "stage": "config"}
        snapshot.state_annotation = json.dumps(recorded)
