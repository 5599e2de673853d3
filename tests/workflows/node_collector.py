"""A stand-in rollout for node workflow tests: collects `node_result` signals. Deterministic."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.messages import SIGNAL_NODE_RESULT, NodeResult


@workflow.defn(name="TestResultCollector")
class ResultCollector:
    """Stands in for a rollout: collects `node_result` signals until told to stop."""

    def __init__(self) -> None:
        self.results: list[NodeResult] = []
        self.done = False

    @workflow.run
    async def run(self) -> list[NodeResult]:
        await workflow.wait_condition(lambda: self.done)
        return self.results

    @workflow.signal(name=SIGNAL_NODE_RESULT)
    def node_result(self, result: NodeResult) -> None:
        self.results.append(result)

    @workflow.signal
    def stop(self) -> None:
        self.done = True

    @workflow.query
    def collected(self) -> list[NodeResult]:
        return self.results
