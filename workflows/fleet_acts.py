"""What a fleet does outside its own state: list nodes, hand out and withdraw windows, watch node
workflows, wait. Deterministic, no I/O (every side effect is an activity called by name or a signal).

`FleetActs` acts on the `FleetRun` it is given (`workflows/fleet_run.py`); the workflow and the
other helpers (`fleet_holds.py`, `fleet_rollback.py`) call it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from planning import disruption
    from planning import fleet_rollback as rollbacks
    from planning import fleet_state as fs
    from planning.disruption import listing_label_keys
    from planning.fleet_targets import FleetSelection
    from protocol import names
    from protocol.activities import (
        DescribeWorkflowRunsInput,
        DescribeWorkflowRunsResult,
        ListFleetNodesInput,
        ListFleetNodesResult,
        RequestWindowsInput,
    )
    from protocol.fleet import WindowCancel, WindowRequest
    from workflows.fleet_codec import marks_from_json, selection_from_json
    from workflows.fleet_run import ONE_SECOND, FleetRun, apply_inbox
    from workflows.node_marks import mark_nodes

ACTIVITY_TIMEOUT = timedelta(minutes=5)
UNPROVEN_CHANGES_PATCH = "unproven-changes-count-again"
# Requests per `request_windows` call: keeps each activity payload well under 2 MB.
REQUEST_CHUNK = 50
# `nodes_changed` comes at every cordon of every node: re-list at most this often.
RELIST_MIN_INTERVAL = timedelta(seconds=30)


class FleetActs:
    """Listing, requests, withdrawals, the watchdog and the waits of one fleet run."""

    def __init__(self, run: FleetRun) -> None:
        self.run = run

    # --- listing -------------------------------------------------------------------------------

    async def list(self) -> FleetSelection:
        run = self.run
        state = run.state
        assert state.spec is not None
        # Cleared before listing: a change reported while the listing runs asks for another one.
        run.relist_requested, run.relist, run.relist_now = False, False, False
        result = await workflow.execute_activity(
            "list_fleet_nodes",
            ListFleetNodesInput(
                packages=list(state.spec.packages),
                in_flight={n: list(f.packages) for n, f in state.in_flight.items()},
                label_keys=listing_label_keys(run.policy),
                supply=bool(disruption.limits_of(run.policy)),
                resources=disruption.floor_resources(run.policy),
                respect=run.policy.respect.dump() if run.policy.respect else {},
            ),
            result_type=ListFleetNodesResult,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            heartbeat_timeout=timedelta(seconds=60),
            summary="list and classify nodes",
        )
        run.listed_at = workflow.now()
        run.resolved = True
        await mark_nodes(marks_from_json(result.marks))
        return selection_from_json(result.selection)

    async def start_wave(self, held: Callable[[], bool] = lambda: False) -> None:
        """A new wave over the nodes not at the desired state (nothing is in flight).

        A desired state that arrives while the nodes are listed (the bridge often hands two Packages
        applied together over in two passes) is applied before the wave starts, and the nodes are
        listed again for it: the Packages then share the wave's windows instead of the first batch
        going out with the first Package alone.
        """
        run = self.run
        state = run.state
        while True:
            listed_for = state.spec
            selection = await self.list()
            apply_inbox(run)
            if state.spec is listed_for:
                break
        if held():
            return  # spec.clusters: the change set that arrived meanwhile waits for its turn (fleet_turns)
        # Runs recorded before the rule (planning.fleet_rollback: unproven changes) replay without it.
        fs.start_wave(state, selection, run.policy, run.fleet_id, workflow.patched(UNPROVEN_CHANGES_PATCH))
        state.message = (f"wave {state.wave}: {len(fs.startable(state))} node(s) to update"
                         + (f" (changes {', '.join(state.changed)})" if state.changed else " (policy changed)"))
        workflow.logger.info("%s: %s", run.fleet_id, state.message)

    async def refresh(self) -> None:
        """Pick up joining nodes, departures, lifted taints and dependencies within the wave."""
        selection = await self.list()
        joined = fs.refresh_targets(self.run.state, selection, self.run.policy)
        if joined:
            workflow.logger.info("%s: %d node(s) joined", self.run.fleet_id, len(joined))

    def relist_due(self, next_relist: datetime) -> bool:
        """A re-list now: a `nodes_changed` one past its rate limit, the periodic one, or one asked at once."""
        run = self.run
        now = workflow.now()
        return ((run.relist_wanted() and now >= run.listed_at + RELIST_MIN_INTERVAL)
                or now >= next_relist or run.relist_now)

    # --- requests ------------------------------------------------------------------------------

    async def send(self, nodes: list[str]) -> None:
        """Hand each node one request for every Package it wants now (signal-with-start)."""
        handed = fs.hand_out(self.run.state, self.run.fleet_id, nodes, workflow.now().isoformat())
        await self.hand_over([request for _node, request in handed], [node for node, _request in handed])

    async def hand_over(self, requests: list[WindowRequest], nodes: list[str]) -> None:
        for start in range(0, len(nodes), REQUEST_CHUNK):
            chunk = nodes[start:start + REQUEST_CHUNK]
            await workflow.execute_activity(
                "request_windows",
                RequestWindowsInput(requests=requests[start:start + REQUEST_CHUNK], nodes=chunk,
                                    task_queue=self.run.input.node_task_queue, cluster=self.run.input.cluster),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=60),
                summary=f"request {len(chunk)} node window(s)",
            )

    async def withdraw(self) -> None:
        """Ask node workflows to drop requests that have not started (they answer `withdrawn`)."""
        run = self.run
        pending = sorted(n for n in run.to_withdraw if n in run.state.in_flight and n not in run.withdrawing)
        run.to_withdraw.clear()
        for node in pending:
            flight = run.state.in_flight[node]
            run.withdrawing.add(node)
            handle = workflow.get_external_workflow_handle(names.node_workflow_id(node, run.input.cluster))
            try:
                await handle.signal(names.SIGNAL_WINDOW_CANCEL, WindowCancel(run.fleet_id, flight.request_id))
            except Exception as err:  # noqa: BLE001 - a node workflow that ended is caught by the watchdog
                workflow.logger.info("withdrawal from node %s not delivered: %s", node, err)

    # --- watchdog --------------------------------------------------------------------------------

    async def watchdog(self) -> None:
        """Every `watchdog_seconds` while windows are out: are their node workflows still running?"""
        run = self.run
        state = run.state
        every = timedelta(seconds=run.input.watchdog_seconds)
        if not state.in_flight or workflow.now() < run.next_watchdog:
            return
        run.next_watchdog = workflow.now() + every
        suspects = fs.overdue(state, workflow.now(), every)
        if not suspects:
            return
        result = await workflow.execute_activity(
            "describe_workflow_runs",
            DescribeWorkflowRunsInput([names.node_workflow_id(n, run.input.cluster) for n in suspects]),
            result_type=DescribeWorkflowRunsResult,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            summary=f"check {len(suspects)} node workflow(s)",
        )
        # Answers that arrived meanwhile come first: a node workflow answers before it closes.
        apply_inbox(run)
        again: list[str] = []
        for workflow_id in result.closed:
            node = workflow_id.removeprefix(names.node_id_prefix(run.input.cluster))
            if node not in state.in_flight:
                continue  # its answer came with (or before) this result: a window that simply ended
            how = result.statuses.get(workflow_id, "closed")
            if fs.lost(state, node, how):
                again.append(node)
            workflow.logger.warning("%s: node workflow %s closed (%s) without answering", run.fleet_id,
                                    workflow_id, how)
        if again:
            await self._resend(again)

    async def _resend(self, nodes: list[str]) -> None:
        """Ask again, with a new request id, nodes whose node workflow closed without answering."""
        state, fleet_id = self.run.state, self.run.fleet_id
        entries = fs.entries(state)
        requests, targets = [], []
        now = workflow.now().isoformat()
        for node in nodes:
            flight = state.in_flight[node]
            request_id = fs.request_id(state, fleet_id, node)
            if flight.rollback and state.rollback is not None:
                orders, reruns = rollbacks.orders_for(state.rollback, node), []
                packages = [o.name for o in orders]
            else:
                packages = [p for p in flight.packages if p in entries]
                orders, reruns = fs.package_orders(state, node, packages)
            state.in_flight[node] = fs.InFlight(request_id, packages, now, flight.resent + 1, reruns,
                                                rollback=flight.rollback)
            requests.append(WindowRequest(fleet_id, request_id, orders, state.wave, fs.order_of(state, node),
                                          verify=(state.spec.policy or {}).get("verify") if state.spec else None))
            targets.append(node)
        await self.hand_over(requests, targets)

    # --- waiting ---------------------------------------------------------------------------------

    async def wait(self, timeout: timedelta | None) -> bool:
        """Wait for a message (or the timeout); False when the timeout passed.

        Shortened to when a pending re-list is due, and to the next watchdog round while windows are out
        (and to the close of a maintenance window or a continuous gate's next sample, `FleetRun.hold_wakeups`,
        and to drain-ahead's next change, `FleetRun.ahead_wake`).
        """
        run = self.run
        due: list[timedelta] = [] if timeout is None else [timeout]
        if run.relist_wanted():
            due.append(max(run.listed_at + RELIST_MIN_INTERVAL - workflow.now(), ONE_SECOND))
        if run.state.in_flight:
            due.append(max(run.next_watchdog - workflow.now(), ONE_SECOND))
        due.extend(run.hold_wakeups())
        if run.ahead_wake is not None:
            due.append(max(run.ahead_wake - workflow.now(), ONE_SECOND))
        wait_for = min(due) if due else None
        try:
            await workflow.wait_condition(lambda: bool(run.inbox), timeout=wait_for)
        except TimeoutError:
            # Not the caller's timeout when a re-list or the watchdog cut it short.
            return timeout is None or wait_for != timeout
        return True

    async def wait_unfinished(self, next_relist: datetime, keep_phase: bool = False) -> None:
        """Nothing to start now: windows are out, or nodes wait (dependencies, pauses)."""
        if not keep_phase:
            self.run.set_working_phase()
        if not await self.wait(max(next_relist - workflow.now(), ONE_SECOND)):
            self.run.relist = True
