"""A stand-in node workflow for fleet tests: records the `window_cancel` signals a fleet sends. Deterministic."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from protocol.fleet import WindowCancel
    from protocol.names import SIGNAL_WINDOW_CANCEL


@workflow.defn(name="TestWindowCancelLog")
class WindowCancelLog:
    """Stands in for `node/<node>`: records the request ids of `window_cancel` (query `cancelled`)."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)  # until the test terminates it

    @workflow.signal(name=SIGNAL_WINDOW_CANCEL)
    def window_cancel(self, cancel: WindowCancel) -> None:
        self.cancelled.append(cancel.request_id)

    @workflow.query(name="cancelled")
    def cancels(self) -> list[str]:
        return self.cancelled
