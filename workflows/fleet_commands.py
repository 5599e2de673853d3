"""How the fleet workflow carries out its machine's commands (`planning.fleet.commands`). Deterministic, no I/O.

One method per kind of command, each the Temporal call the command names: activities by name with their
timeouts and retry policies, signals to node workflows, durable waits on the inbox, search attributes and
the details line. Nothing here decides: a failure that the machine must know of is answered as
`Failed` (or a `GateSample` with the reason), anything else as the command's result.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

with workflow.unsafe.imports_passed_through():
    from planning.fleet.commands import (
        Command,
        DescribeRuns,
        Failed,
        GateSample,
        HistoryFull,
        ListNodes,
        Log,
        MarkBlocked,
        MarkUpcoming,
        Patched,
        QueryGate,
        ReadSupply,
        ReportToGlobal,
        RequestWindows,
        Show,
        Wait,
        WaitHandlers,
        Withdraw,
    )
    from planning.fleet.run import FleetRun
    from protocol import names
    from protocol.activities import (
        DescribeWorkflowRunsResult,
        ListFleetNodesResult,
        MarkUpcomingNodesResult,
        QueryPrometheusInput,
        QueryPrometheusResult,
        ReadNodeSupplyResult,
        RequestWindowsInput,
    )
    from protocol.activity_refs import (
        DESCRIBE_WORKFLOW_RUNS,
        LIST_FLEET_NODES,
        MARK_UPCOMING_NODES,
        QUERY_PROMETHEUS,
        READ_NODE_SUPPLY,
        REPORT_TO_GLOBAL,
        REQUEST_WINDOWS,
    )
    from protocol.errors import PROMETHEUS_NOT_CONFIGURED, PROMETHEUS_QUERY_ERROR, PROMETHEUS_RESULT_TYPE
    from protocol.fleet import FleetInput
    from workflows.api_retries import outlasting
    from workflows.node_marks import mark_blocked

PACKAGE_KEY = SearchAttributeKey.for_keyword_list(names.SEARCH_ATTR_PACKAGE)
PHASE_KEY = SearchAttributeKey.for_keyword(names.SEARCH_ATTR_PHASE)
HISTORY_BYTES_LIMIT = 8 * 1024 * 1024
ACTIVITY_TIMEOUT = timedelta(minutes=5)
# Requests per `request_windows` call: keeps each activity payload well under 2 MB.
REQUEST_CHUNK = 50
# Drain-ahead's marks and the fresh read before a hand-out are retried through an apiserver outage like
# the window's calls (`workflows.api_retries`).
NODE_CALL_RETRY = outlasting(timedelta(seconds=2), timedelta(seconds=30))
# An unreachable Prometheus is asked four times (1, 2 and 4 s apart), then the gate fails with the reason.
GATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=10),
    maximum_attempts=4,
    non_retryable_error_types=[PROMETHEUS_QUERY_ERROR, PROMETHEUS_RESULT_TYPE, PROMETHEUS_NOT_CONFIGURED],
)
GATE_QUERY_TIMEOUT = timedelta(seconds=60)
REPORT_TIMEOUT = timedelta(minutes=1)
HEARTBEAT = timedelta(seconds=60)


class FleetCommands:
    """Carries out the commands of one fleet run's machine (module docstring)."""

    def __init__(self, run: FleetRun, input: FleetInput) -> None:
        self.run = run
        self.input = input

    async def carry_out(self, command: Command) -> Any:
        """Do what `command` says; its answer for the machine."""
        if isinstance(command, Show):
            return self._show(command)
        if isinstance(command, Log):
            (workflow.logger.warning if command.warning else workflow.logger.info)("%s", command.text)
            return None
        if isinstance(command, Patched):
            return workflow.patched(command.patch_id)
        if isinstance(command, HistoryFull):
            info = workflow.info()
            return (info.is_continue_as_new_suggested() or info.get_current_history_length() > command.limit
                    or info.get_current_history_size() > HISTORY_BYTES_LIMIT)
        if isinstance(command, Wait):
            return await self._wait(command.timeout)
        if isinstance(command, WaitHandlers):
            await workflow.wait_condition(workflow.all_handlers_finished)
            return None
        if isinstance(command, RequestWindows):
            return await self._request_windows(command)
        if isinstance(command, Withdraw):
            return await self._withdraw(command)
        if isinstance(command, QueryGate):
            return await self._query_gate(command)
        return await self._activity(command)

    def _show(self, command: Show) -> None:
        if command.details is not None:
            workflow.set_current_details(command.details)
        if command.phase is not None:
            workflow.upsert_search_attributes([PHASE_KEY.value_set(command.phase.value)])
        if command.packages is not None:
            workflow.upsert_search_attributes([PACKAGE_KEY.value_set(command.packages)])

    async def _wait(self, timeout: timedelta | None) -> bool:
        run = self.run
        try:
            await workflow.wait_condition(lambda: bool(run.inbox), timeout=timeout)
        except TimeoutError:
            return False
        return True

    async def _activity(self, command: Command) -> Any:
        if isinstance(command, ListNodes):
            return await workflow.execute_activity(
                LIST_FLEET_NODES.name, command.input, result_type=ListFleetNodesResult,
                start_to_close_timeout=ACTIVITY_TIMEOUT, heartbeat_timeout=HEARTBEAT, summary="list and classify nodes")
        if isinstance(command, MarkBlocked):
            await mark_blocked(command.input)
            return None
        if isinstance(command, DescribeRuns):
            return await workflow.execute_activity(
                DESCRIBE_WORKFLOW_RUNS.name, command.input, result_type=DescribeWorkflowRunsResult,
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                summary=f"check {len(command.input.workflow_ids)} node workflow(s)")
        if isinstance(command, ReportToGlobal):
            await workflow.execute_activity(
                REPORT_TO_GLOBAL.name, command.input, start_to_close_timeout=REPORT_TIMEOUT,
                summary=f"report {command.what} to global/{command.input.policy}")
            return None
        try:
            if isinstance(command, MarkUpcoming):
                mark = command.input
                return await workflow.execute_activity(
                    MARK_UPCOMING_NODES.name, mark, result_type=MarkUpcomingNodesResult,
                    start_to_close_timeout=ACTIVITY_TIMEOUT, heartbeat_timeout=HEARTBEAT, retry_policy=NODE_CALL_RETRY,
                    summary=f"mark {len(mark.mark)} node(s) upcoming, unmark {len(mark.unmark)}")
            if isinstance(command, ReadSupply):
                return await workflow.execute_activity(
                    READ_NODE_SUPPLY.name, command.input, result_type=ReadNodeSupplyResult,
                    start_to_close_timeout=ACTIVITY_TIMEOUT, heartbeat_timeout=HEARTBEAT, retry_policy=NODE_CALL_RETRY,
                    summary=f"read {len(command.input.nodes)} node(s) before a hand-out")
        except ActivityError as err:
            return Failed(str(err.cause or err))
        raise TypeError(f"the fleet machine asked for an unknown command: {command!r}")

    async def _request_windows(self, command: RequestWindows) -> None:
        """Hand the requests over in chunks (`request_windows`: signal-with-start each node workflow)."""
        for start in range(0, len(command.nodes), REQUEST_CHUNK):
            chunk = command.nodes[start:start + REQUEST_CHUNK]
            await workflow.execute_activity(
                REQUEST_WINDOWS.name,
                RequestWindowsInput(requests=command.requests[start:start + REQUEST_CHUNK], nodes=chunk,
                                    task_queue=self.input.node_task_queue, cluster=self.input.cluster),
                start_to_close_timeout=ACTIVITY_TIMEOUT, heartbeat_timeout=HEARTBEAT,
                summary=f"request {len(chunk)} node window(s)",
            )

    async def _withdraw(self, command: Withdraw) -> None:
        """Signal `window_cancel` to each node workflow; one that ended is caught by the watchdog."""
        for workflow_id, cancel in command.cancels:
            handle = workflow.get_external_workflow_handle(workflow_id)
            try:
                await handle.signal(names.SIGNAL_WINDOW_CANCEL, cancel)
            except Exception as err:  # noqa: BLE001 - a node workflow that ended is caught by the watchdog
                workflow.logger.info("withdrawal from %s not delivered: %s", workflow_id, err)

    async def _query_gate(self, command: QueryGate) -> GateSample:
        """One instant query of a gate (activity `query_prometheus`), or why it could not be evaluated."""
        gate = command.gate
        try:
            result = await workflow.execute_activity(
                QUERY_PROMETHEUS.name, QueryPrometheusInput(gate.query, gate.address or "", gate.name),
                result_type=QueryPrometheusResult, start_to_close_timeout=GATE_QUERY_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=30), retry_policy=GATE_RETRY,
                summary=f"gate {gate.name}: {gate.query}"[:200],
            )
        except ActivityError as err:
            cause = err.cause
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            if err.retry_state is RetryState.MAXIMUM_ATTEMPTS_REACHED:
                reason += f" (gave up after {GATE_RETRY.maximum_attempts} attempts)"
            return GateSample(error=reason)
        return GateSample(result=result)
