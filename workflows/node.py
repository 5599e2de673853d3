"""The per-node workflow `node/<node>`: the single writer of one node's noderoll state. Deterministic.

Fleets (`fleet/<policy>`) hand it window requests by signal-with-start (`window`, a `WindowRequest`
carrying every Package of the fleet pending on this node; `protocol.node.signal_node_workflow`). It
queues them, one per fleet (a newer request from the same fleet replaces a queued one, which is
answered `withdrawn`), runs ONE window per request in arrival order (`workflows/node_window.py`: one
drain, one merged interrupt), answers each request exactly once (`window_result` to its fleet), and
completes when nothing is queued, so every window's history stays small and the next request
starts a fresh run. `window_cancel` withdraws a request that has not started (answered
`withdrawn`). A Package that ended erroring is not held here: its fleet asks again on `retry`
(ADR 0004, 0007).

Before each window the node is read once (`read_node`); a node that does not exist answers the
request `blocked`, and an API that stays unreachable beyond the activity's retries keeps the
request queued and tries again a minute later.

`reset` (a `NodeReset`, signal-with-start; `noderoll node reset`) forgets recorded state between
windows, once per id (`workflows.node_reset`): the way out of a node held for an unreadable
`noderoll.io/state`, and of a node reimaged under the same name.

Search attributes: `NoderollNode`, `NoderollPhase` (`Running`, `Draining`, `Interrupting` while a
window runs, `Idle` between windows) and `NoderollPackage` (every Package this run carried).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from api.enums import State
    from planning.node.window import window_key
    from protocol import errors, names
    from protocol.activity_refs import READ_NODE
    from protocol.fleet import NodeReset, PackageOutcome, WindowCancel, WindowRequest, WindowResult
    from protocol.node import NodeWorkflowInput
    from protocol.node_activities import NodeInput, ReadNodeResult
    from workflows.node_reset import apply_reset
    from workflows.node_window import run_window
    from workflows.short_calls import short_call

NODE_KEY = SearchAttributeKey.for_keyword(names.SEARCH_ATTR_NODE)
PHASE_KEY = SearchAttributeKey.for_keyword(names.SEARCH_ATTR_PHASE)
PACKAGE_KEY = SearchAttributeKey.for_keyword_list(names.SEARCH_ATTR_PACKAGE)
# A node workflow with requests queued back to back continues as new well before this.
HISTORY_EVENT_LIMIT = 2_000
READ_RETRY_DELAY = timedelta(minutes=1)


@workflow.defn(name=names.NODE_WORKFLOW_TYPE)
class NodeWorkflow:
    """Queues the fleets' window requests for one node and runs them (see the module docstring)."""

    def __init__(self) -> None:
        # Signal-with-start delivers `window` before `run` starts: state must exist already.
        # Requests by fleet workflow id, in arrival order (one per fleet).
        self._queue: dict[str, WindowRequest] = {}
        # Request and reset ids seen by this run (duplicates are dropped).
        self._seen: set[str] = set()
        # `reset` requests not applied yet (applied between windows, in order).
        self._resets: list[NodeReset] = []
        self._phase = ""
        self._windows = 0
        # Packages this run carried (search attribute NoderollPackage) and the last outcome of each.
        self._carried: list[str] = []
        self._last: dict[str, str] = {}

    @workflow.run
    async def run(self, input: NodeWorkflowInput) -> None:
        """Run windows until nothing is queued, then complete."""
        # Carried through continue-as-new, or the request the run was started with (`start_window`): they
        # came before any signal of this run, so they go first; each is seen, so the same request
        # signalled again (a retried hand-over) is dropped. A signal handled before this point (it came
        # with the run's first task) may hold a newer request of the same fleet: the input's one is then
        # superseded and answered so, as the handler answers a queued one it replaces.
        earlier: dict[str, WindowRequest] = {}
        for window in input.windows:
            if window.request_id in self._seen:
                continue
            self._seen.add(window.request_id)
            newer = self._queue.get(window.fleet_workflow_id)
            if newer is not None:
                await self._answer(window.fleet_workflow_id, WindowResult(
                    node=input.node, request_id=window.request_id, withdrawn=True,
                    message=f"superseded by request {newer.request_id}"))
            else:
                earlier.setdefault(window.fleet_workflow_id, window)
        self._queue = {**earlier, **self._queue}
        self._resets.extend(input.resets)
        workflow.upsert_search_attributes([NODE_KEY.value_set(input.node)])
        while True:
            if self._resets:
                # Between windows only: a running window finishes (and writes) first.
                request = self._resets.pop(0)
                done = await apply_reset(input.node, request)
                workflow.logger.info("node %s: reset %s: %s", input.node, request.id, done)
                continue
            if self._queue:
                if self._should_continue_as_new():
                    await self._continue_as_new(input)
                await self._window(input, self._queue.pop(next(iter(self._queue))))
                continue
            # Complete only when no handler runs and, right before returning, nothing is queued.
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not (self._queue or self._resets):
                self._set_phase("Idle")
                return

    async def _continue_as_new(self, input: NodeWorkflowInput) -> None:
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(dataclasses.replace(
            input, windows=list(self._queue.values()), resets=list(self._resets)))

    # --- messages ---------------------------------------------------------------------------

    @workflow.signal(name=names.SIGNAL_WINDOW)
    async def window(self, request: WindowRequest) -> None:
        """Queue a fleet's request; a duplicate is dropped, a newer one from the same fleet replaces it."""
        if request.request_id in self._seen:
            return
        self._seen.add(request.request_id)
        replaced = self._queue.pop(request.fleet_workflow_id, None)
        self._queue[request.fleet_workflow_id] = request
        if replaced is not None:
            await self._answer(replaced.fleet_workflow_id, WindowResult(
                node=self._node(), request_id=replaced.request_id, withdrawn=True,
                message=f"superseded by request {request.request_id}"))

    @workflow.signal(name=names.SIGNAL_WINDOW_CANCEL)
    async def window_cancel(self, cancel: WindowCancel) -> None:
        """Withdraw a fleet's request that has not started (a running window finishes and answers)."""
        queued = self._queue.get(cancel.fleet_workflow_id)
        if queued is None or queued.request_id != cancel.request_id:
            return
        del self._queue[cancel.fleet_workflow_id]
        await self._answer(cancel.fleet_workflow_id, WindowResult(
            node=self._node(), request_id=cancel.request_id, withdrawn=True, message="withdrawn by the fleet"))

    @workflow.signal(name=names.SIGNAL_NODE_RESET)
    def reset(self, request: NodeReset) -> None:
        """Forget recorded state (all, or some packages) between windows, once per id (workflows.node_reset)."""
        if request.id in self._seen:
            return
        self._seen.add(request.id)
        self._resets.append(request)

    @workflow.query(name=names.QUERY_NODE_STATUS)
    def status(self) -> dict[str, Any]:
        """Phase, the fleets whose requests are queued, windows run and the last outcome per package."""
        return {"phase": self._phase, "fleets": list(self._queue), "windows": self._windows,
                "results": dict(sorted(self._last.items()))}

    # --- windows ----------------------------------------------------------------------------

    def _set_phase(self, phase: str) -> None:
        if phase == self._phase:
            return
        self._phase = phase
        workflow.upsert_search_attributes([PHASE_KEY.value_set(phase)])
        workflow.set_current_details(f"{phase}: queued {list(self._queue) or 'nothing'}")

    def _node(self) -> str:
        # `node/<node>` or `node/<cluster>/<node>`: node names never contain '/'.
        return workflow.info().workflow_id.rsplit("/", 1)[-1]

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > HISTORY_EVENT_LIMIT

    async def _answer(self, fleet_workflow_id: str, result: WindowResult) -> None:
        self._last.update({name: outcome.state for name, outcome in result.outcomes.items()})
        try:
            await workflow.get_external_workflow_handle(fleet_workflow_id).signal(names.SIGNAL_WINDOW_RESULT, result)
        except Exception as err:  # noqa: BLE001 - a fleet that ended no longer needs the answer
            workflow.logger.info("window result not delivered to %s: %s", fleet_workflow_id, err)

    async def _window(self, input: NodeWorkflowInput, request: WindowRequest) -> None:
        """One window for every Package of a fleet's request; answered exactly once."""
        carried = sorted({*self._carried, *(o.name for o in request.packages)})
        if carried != self._carried:
            self._carried = carried
            workflow.upsert_search_attributes([PACKAGE_KEY.value_set(carried)])
        try:
            snapshot = await short_call(READ_NODE.name, NodeInput(input.node), ReadNodeResult, "read node")
        except ActivityError as err:
            cause = err.cause
            if not (isinstance(cause, ApplicationError) and cause.type == errors.NODE_NOT_FOUND):
                # The API is unreachable beyond the activity's retries: keep the request (first in line), try later.
                workflow.logger.warning("reading node %s failed, retrying in %s: %s", input.node, READ_RETRY_DELAY, err)
                self._queue = {request.fleet_workflow_id: request, **self._queue}
                await workflow.sleep(READ_RETRY_DELAY)
                return
            message = f"node {input.node} does not exist"
            result = WindowResult(input.node, request.request_id, message=message, outcomes={
                o.name: PackageOutcome(State.BLOCKED.value, str(o.spec.get("version", "")), message=message)
                for o in request.packages})
        else:
            self._windows += 1
            self._set_phase("Running")
            result = await run_window(input, request, snapshot, window_key(workflow.info().run_id, self._windows),
                                      self._set_phase)
        self._set_phase("Idle")
        await self._answer(request.fleet_workflow_id, result)
