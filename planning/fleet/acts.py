"""What a fleet does outside its own state: list nodes, hand out and withdraw windows, watch node
workflows, wait. Pure (machine steps over a `FleetRun`; every side effect is a command).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from planning.fleet.codec import marks_from_json, marks_to_json, selection_from_json
from planning.fleet.commands import DescribeRuns, ListNodes, MarkBlocked, RequestWindows, Wait, Withdraw
from planning.fleet.inbox import apply_inbox
from planning.fleet.run import ONE_SECOND, FleetRun, Steps
from planning.rollout import disruption
from planning.rollout import fleet_rollback as rollbacks
from planning.rollout import fleet_state as fs
from planning.rollout.disruption import listing_label_keys
from planning.rollout.fleet_targets import FleetSelection
from protocol import names
from protocol.activities import (
    DescribeWorkflowRunsInput,
    DescribeWorkflowRunsResult,
    ListFleetNodesInput,
    ListFleetNodesResult,
    MarkBlockedNodesInput,
)
from protocol.fleet import WindowCancel, WindowRequest

UNPROVEN_CHANGES_PATCH = "unproven-changes-count-again"


# --- listing -------------------------------------------------------------------------------------


def list_nodes(run: FleetRun) -> Steps[FleetSelection]:
    """List and classify the fleet's nodes; show on blocked nodes what they must show."""
    state = run.state
    assert state.spec is not None
    # Cleared before listing: a change reported while the listing runs asks for another one.
    run.relist_requested, run.relist, run.relist_now = False, False, False
    result: ListFleetNodesResult = yield ListNodes(ListFleetNodesInput(
        packages=list(state.spec.packages),
        in_flight={n: list(f.packages) for n, f in state.in_flight.items()},
        label_keys=listing_label_keys(run.policy),
        supply=bool(disruption.limits_of(run.policy)),
        resources=disruption.floor_resources(run.policy),
        respect=run.respect_json(),
    ))
    run.listed_at = run.now
    run.resolved = True
    marks = marks_from_json(result.marks)
    if marks:
        yield MarkBlocked(MarkBlockedNodesInput(marks_to_json(marks)))
    return selection_from_json(result.selection)


def start_wave(run: FleetRun, held: Callable[[], Steps[bool]]) -> Steps[None]:
    """A new wave over the nodes not at the desired state (nothing is in flight).

    A desired state that arrives while the nodes are listed (the bridge often hands two Packages
    applied together over in two passes) is applied before the wave starts, and the nodes are
    listed again for it: the Packages then share the wave's windows instead of the first batch
    going out with the first Package alone.
    """
    state = run.state
    while True:
        listed_for = state.spec
        selection = yield from list_nodes(run)
        yield from apply_inbox(run)
        if state.spec is listed_for:
            break
    if (yield from held()):
        return  # spec.clusters: the change set that arrived meanwhile waits for its turn (planning.fleet.turns)
    # Runs recorded before the rule (planning.rollout.fleet_rollback: unproven changes) replay without it.
    recount = yield from run.patched(UNPROVEN_CHANGES_PATCH)
    fs.start_wave(state, selection, run.policy, run.fleet_id, recount)
    state.message = (f"wave {state.wave}: {len(fs.startable(state))} node(s) to update"
                     + (f" (changes {', '.join(state.changed)})" if state.changed else " (policy changed)"))
    yield from run.log(state.message)


def refresh(run: FleetRun) -> Steps[None]:
    """Pick up joining nodes, departures, lifted taints and dependencies within the wave."""
    selection = yield from list_nodes(run)
    joined = fs.refresh_targets(run.state, selection, run.policy)
    if joined:
        yield from run.log(f"{len(joined)} node(s) joined")


# --- requests --------------------------------------------------------------------------------------


def send(run: FleetRun, nodes: list[str]) -> Steps[None]:
    """Hand each node one request for every Package it wants now (signal-with-start)."""
    handed = fs.hand_out(run.state, run.fleet_id, nodes, run.stamp())
    yield from hand_over([request for _node, request in handed], [node for node, _request in handed])


def hand_over(requests: list[WindowRequest], nodes: list[str]) -> Steps[None]:
    """The requests to their node workflows (none: no command)."""
    if nodes:
        yield RequestWindows(requests, nodes)


def withdraw(run: FleetRun) -> Steps[None]:
    """Ask node workflows to drop requests that have not started (they answer `withdrawn`)."""
    pending = sorted(n for n in run.to_withdraw if n in run.state.in_flight and n not in run.withdrawing)
    run.to_withdraw.clear()
    cancels = []
    for node in pending:
        run.withdrawing.add(node)
        cancels.append((names.node_workflow_id(node, run.input.cluster),
                        WindowCancel(run.fleet_id, run.state.in_flight[node].request_id)))
    if cancels:
        yield Withdraw(cancels)


# --- watchdog --------------------------------------------------------------------------------------


def watchdog(run: FleetRun) -> Steps[None]:
    """Every `watchdog_seconds` while windows are out: are their node workflows still running?"""
    state = run.state
    every = timedelta(seconds=run.input.watchdog_seconds)
    if not state.in_flight or run.now < run.next_watchdog:
        return
    run.next_watchdog = run.now + every
    suspects = fs.overdue(state, run.now, every)
    if not suspects:
        return
    result: DescribeWorkflowRunsResult = yield DescribeRuns(
        DescribeWorkflowRunsInput([names.node_workflow_id(n, run.input.cluster) for n in suspects]))
    # Answers that arrived meanwhile come first: a node workflow answers before it closes.
    yield from apply_inbox(run)
    again: list[str] = []
    for workflow_id in result.closed:
        node = workflow_id.removeprefix(names.node_id_prefix(run.input.cluster))
        if node not in state.in_flight:
            continue  # its answer came with (or before) this result: a window that simply ended
        how = result.statuses.get(workflow_id, "closed")
        if fs.lost(state, node, how):
            again.append(node)
        yield from run.log(f"node workflow {workflow_id} closed ({how}) without answering", warning=True)
    if again:
        yield from _resend(run, again)


def _resend(run: FleetRun, nodes: list[str]) -> Steps[None]:
    """Ask again, with a new request id, nodes whose node workflow closed without answering."""
    state, fleet_id = run.state, run.fleet_id
    entries = fs.entries(state)
    requests, targets = [], []
    for node in nodes:
        flight = state.in_flight[node]
        request_id = fs.request_id(state, fleet_id, node)
        if flight.rollback and state.rollback is not None:
            orders, reruns = rollbacks.orders_for(state.rollback, node), []
            packages = [o.name for o in orders]
        else:
            packages = [p for p in flight.packages if p in entries]
            orders, reruns = fs.package_orders(state, node, packages)
        state.in_flight[node] = fs.InFlight(request_id, packages, run.stamp(), flight.resent + 1, reruns,
                                            rollback=flight.rollback)
        requests.append(fs.window_request(state, fleet_id, orders, node))
        targets.append(node)
    fs.touch_nodes(state, targets)
    yield from hand_over(requests, targets)


# --- waiting ---------------------------------------------------------------------------------------


def wait(run: FleetRun, timeout: timedelta | None) -> Steps[bool]:
    """Wait for a message (or the timeout); False when the timeout passed.

    Shortened to when a pending re-list is due, and to the next watchdog round while windows are out
    (and to the close of a maintenance window or a continuous gate's next sample, `FleetRun.hold_wakeups`,
    and to drain-ahead's next change, `FleetRun.ahead_wake`).
    """
    due: list[timedelta] = [] if timeout is None else [timeout]
    if (yield from run.relist_wanted()):
        due.append(max(run.listed_at + run.relist_gap - run.now, ONE_SECOND))
    if run.state.in_flight:
        due.append(max(run.next_watchdog - run.now, ONE_SECOND))
    due.extend(run.hold_wakeups())
    if run.ahead_wake is not None:
        due.append(max(run.ahead_wake - run.now, ONE_SECOND))
    wait_for = min(due) if due else None
    if (yield Wait(wait_for)):
        return True
    # Not the caller's timeout when a re-list or the watchdog cut it short.
    return timeout is None or wait_for != timeout


def wait_unfinished(run: FleetRun, next_relist: datetime, keep_phase: bool = False) -> Steps[None]:
    """Nothing to start now: windows are out, or nodes wait (dependencies, pauses)."""
    if not keep_phase:
        yield from run.set_working_phase()
    if not (yield from wait(run, max(next_relist - run.now, ONE_SECOND))):
        run.relist = True
