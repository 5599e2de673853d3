"""Fake activities for rollout workflow tests, registered under the real names.

`FakeFleet` plays the Kubernetes listing and the node workflows: `request_node_windows` records
every request and, for nodes in `auto`, answers at once with `node_result` (erroring for nodes in
`fail`); the test answers the other nodes itself with `answer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import Client

from activities.io import ListTargetNodesInput, ListTargetNodesResult, NodeSnapshot, RequestNodeWindowsInput
from api.enums import State
from api.keys import QUERY_PROGRESS
from planning.status import RolloutProgress
from workflows.messages import SIGNAL_NODE_RESULT, NodeRequest, NodeResult


@dataclass
class FakeFleet:
    """Nodes to list and the behaviour of their (fake) node workflows."""

    nodes: list[NodeSnapshot] = field(default_factory=list)
    auto: bool = True
    fail: set[str] = field(default_factory=set)
    requests: list[tuple[str, NodeRequest]] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)

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

        return [list_target_nodes, request_node_windows]

    def requested(self) -> list[str]:
        return [node for node, _ in self.requests]

    def last_request(self, node: str) -> NodeRequest:
        return [r for n, r in self.requests if n == node][-1]


async def answer(client: Client, node: str, request: NodeRequest, state: State) -> None:
    """Answer `request` on `node` as its node workflow would."""
    await client.get_workflow_handle(request.rollout_workflow_id).signal(
        SIGNAL_NODE_RESULT,
        NodeResult(
            node=node,
            package=request.package,
            version=str(request.spec.get("version", "")),
            request_id=request.request_id,
            state=state.value,
            message="" if state is State.COMPLETE else "apply failed: exit 7",
        ),
    )


async def progress(client: Client, workflow_id: str) -> RolloutProgress:
    return await client.get_workflow_handle(workflow_id).query(QUERY_PROGRESS, result_type=RolloutProgress)
