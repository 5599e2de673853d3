"""A stand-in fleet for node workflow tests: collects `window_result` answers. Deterministic."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from protocol.fleet import WindowResult
    from protocol.names import SIGNAL_WINDOW_RESULT


@workflow.defn(name="TestResultCollector")
class ResultCollector:
    """Stands in for a fleet: collects `window_result` signals until told to stop."""

    def __init__(self) -> None:
        self.windows: list[WindowResult] = []
        self.done = False

    @workflow.run
    async def run(self) -> list[WindowResult]:
        await workflow.wait_condition(lambda: self.done)
        return self.windows

    @workflow.signal(name=SIGNAL_WINDOW_RESULT)
    def window_result(self, result: WindowResult) -> None:
        self.windows.append(result)

    @workflow.query
    def collected_windows(self) -> list[WindowResult]:
        return self.windows

    @workflow.signal
    def stop(self) -> None:
        self.done = True
