"""A stand-in rollout or fleet for node workflow tests: collects `node_result` and `window_result`. Deterministic."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from protocol.fleet import WindowResult
    from protocol.names import SIGNAL_WINDOW_RESULT
    from workflows.messages import SIGNAL_NODE_RESULT, NodeResult


@workflow.defn(name="TestResultCollector")
class ResultCollector:
    """Stands in for a rollout: collects `node_result` signals until told to stop."""

    def __init__(self) -> None:
        self.results: list[NodeResult] = []
        self.windows: list[WindowResult] = []
        self.done = False

    @workflow.run
    async def run(self) -> list[NodeResult]:
        await workflow.wait_condition(lambda: self.done)
        return self.results

    @workflow.signal(name=SIGNAL_NODE_RESULT)
    def node_result(self, result: NodeResult) -> None:
        self.results.append(result)

    @workflow.signal(name=SIGNAL_WINDOW_RESULT)
    def window_result(self, result: WindowResult) -> None:
        self.windows.append(result)

    @workflow.query
    def collected_windows(self) -> list[WindowResult]:
        return self.windows

    @workflow.signal
    def stop(self) -> None:
        self.done = True

    @workflow.query
    def collected(self) -> list[NodeResult]:
        return self.results
