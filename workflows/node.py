"""The per-node workflow `node/<node>`: the single writer of one node's noderoll state. Deterministic.

Fleets (`fleet/<policy>`) hand it window requests by signal-with-start (`window`, a
`WindowRequest` carrying every Package of the fleet pending on this node); it queues them (one
per fleet: a newer request replaces a queued one, which is answered `withdrawn`), runs ONE window
per request (`workflows/node_fleet.py`: one drain, one merged interrupt) in arrival order, answers
each request once (`window_result`), and completes when nothing is queued, so every window's
history stays small and the next request starts a fresh run. `window_cancel` withdraws a request
that has not started (answered `withdrawn`). See docs/adr/0004-node-workflow.md and 0007.

Legacy: per-Package rollouts (`package/<name>`, before fleets) sent `request` (a `NodeRequest`,
one per package); those are still served as before, so runs started before an upgrade finish.
A fleet request supersedes a queued legacy request for one of its Packages (answered `skipped`).

Per window: read the node once, plan with `planning.node_plan` (dependency order, merged
interrupt), answer packages with nothing to do, run the first planned window, answer its
packages (`node_result` to each request's rollout). Packages blocked by a dependency stay queued
and are answered only once they ran. A package that ended erroring is held until the `retry`
signal or a request with another spec or generation; while one is held the workflow stays open.

A node whose `noderoll.io/state` cannot be read is held (runs started since the patch
`PATCH_HOLD_UNREADABLE_STATE`): every queued request is answered `blocked` (`held`, with the
reason), nothing runs and nothing is written over the annotation; the node is marked
(`workflows.node_marks`: condition StateMalformed, Warning Event, label `blocked`). Runs recorded
before the patch replay as they ran (read as "nothing recorded").

`reset` (a `NodeReset`, signal-with-start; `noderoll node reset`) forgets recorded state between
windows, once per id (`workflows.node_reset`): the way out of such a held node, and of a node
reimaged under the same name.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.io import NodeInput, ReadNodeResult
    from api.enums import NodeMarkKind, State
    from api.keys import NODE_WORKFLOW_PREFIX, SEARCH_ATTR_NODE, SEARCH_ATTR_PHASE
    from api.node_state import held_reason, parse_node_state
    from api.package import PackageSpec
    from planning.node_marks import NodeMark
    from planning.node_plan import NodePlanInput, plan_node
    from protocol import errors, names
    from protocol.fleet import NodeReset, PackageOutcome, WindowCancel, WindowRequest, WindowResult
    from workflows.api_retries import API_RETRY
    from workflows.messages import (
        NODE_WORKFLOW_TYPE,
        QUERY_NODE_STATUS,
        SIGNAL_LEASE_GRANTED,
        SIGNAL_NODE_CANCEL,
        SIGNAL_NODE_REQUEST,
        SIGNAL_NODE_RESULT,
        SIGNAL_NODE_RETRY,
        LeaseGrant,
        NodeCancel,
        NodeRequest,
        NodeResult,
        NodeWorkflowInput,
    )
    from workflows.node_fleet import FleetWindowCall, run_fleet_window
    from workflows.node_marks import mark_nodes
    from workflows.node_reset import apply_reset
    from workflows.node_window import (
        API_TIMEOUT,
        CONFIG_STAGE_ON_CONFIG_CHANGE,
        WindowContext,
        WindowRun,
    )

NODE_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTR_NODE)
PHASE_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTR_PHASE)
PACKAGE_KEY = SearchAttributeKey.for_keyword_list(names.SEARCH_ATTR_PACKAGE)
# A node workflow that stays open (a held erroring package) continues as new well before this.
HISTORY_EVENT_LIMIT = 2_000
READ_RETRY_DELAY = timedelta(minutes=1)
# Runs started since this patch hold a node whose state annotation cannot be read (module docstring).
PATCH_HOLD_UNREADABLE_STATE = "node-hold-unreadable-state"


@workflow.defn(name=NODE_WORKFLOW_TYPE)
class NodeWorkflow:
    """Queues package requests for one node and runs node windows (see the module docstring)."""

    def __init__(self) -> None:
        # Signal-with-start delivers `request` before `run` starts: state must exist already.
        self._pending: dict[str, NodeRequest] = {}
        self._held: dict[str, NodeRequest] = {}
        self._seen: set[str] = set()
        self._grants: set[str] = set()
        self._retry = False
        self._changed = False
        self._phase = ""
        self._windows = 0
        self._last_results: dict[str, NodeResult] = {}
        # Fleet requests by fleet workflow id, in arrival order (one per fleet).
        self._fleet_queue: dict[str, WindowRequest] = {}
        # Packages this run carried for fleets (search attribute NoderollPackage).
        self._carried: list[str] = []
        self._node_missing = False
        # `reset` requests not applied yet (applied between windows, in order).
        self._resets: list[NodeReset] = []

    @workflow.run
    async def run(self, input: NodeWorkflowInput) -> None:
        """Run windows until no request is queued (or held erroring), then complete."""
        for request in input.pending:
            self._pending.setdefault(request.package, request)
        for request in input.held:
            self._held.setdefault(request.package, request)
        for window in input.windows:
            self._fleet_queue.setdefault(window.fleet_workflow_id, window)
        self._resets.extend(input.resets)
        workflow.upsert_search_attributes([NODE_KEY.value_set(input.node)])
        while True:
            if self._resets:
                # Between windows only: a running window finishes (and writes) first.
                request = self._resets.pop(0)
                done = await apply_reset(input.node, request)
                workflow.logger.info("node %s: reset %s: %s", input.node, request.id, done)
                continue
            if self._retry:
                self._retry = False
                self._pending.update({n: r for n, r in self._held.items() if n not in self._pending})
                self._held.clear()
            if self._fleet_queue:
                if self._should_continue_as_new():
                    await self._continue_as_new(input)
                await self._fleet_window(input, self._fleet_queue.pop(next(iter(self._fleet_queue))))
                continue
            if not self._pending:
                if not self._held:
                    # Complete only when no handler runs and, right before returning, nothing is queued.
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    if not (self._pending or self._held or self._retry or self._fleet_queue or self._resets):
                        self._set_phase("Idle")
                        return
                    continue
                self._set_phase("Erroring")
                await workflow.wait_condition(
                    lambda: self._retry or bool(self._pending) or bool(self._fleet_queue) or bool(self._resets))
                continue
            if self._should_continue_as_new():
                await self._continue_as_new(input)
            self._changed = False
            if not await self._window(input):
                # Everything queued waits for a dependency: wait for news (a request, retry, cancel).
                self._set_phase("Waiting")
                await workflow.wait_condition(lambda: self._changed or self._retry)

    async def _continue_as_new(self, input: NodeWorkflowInput) -> None:
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(dataclasses.replace(
            input, pending=list(self._pending.values()), held=list(self._held.values()),
            windows=list(self._fleet_queue.values()), resets=list(self._resets)))

    # --- messages ---------------------------------------------------------------------------

    @workflow.signal(name=names.SIGNAL_WINDOW)
    async def window(self, request: WindowRequest) -> None:
        """Queue a fleet's request; a duplicate is dropped, a newer one from the same fleet replaces it."""
        if request.request_id in self._seen:
            return
        self._seen.add(request.request_id)
        self._changed = True
        replaced = self._fleet_queue.pop(request.fleet_workflow_id, None)
        self._fleet_queue[request.fleet_workflow_id] = request
        if replaced is not None:
            await self._answer_fleet(replaced.fleet_workflow_id, WindowResult(
                node=self._node(), request_id=replaced.request_id, withdrawn=True,
                message=f"superseded by request {request.request_id}"))

    @workflow.signal(name=names.SIGNAL_NODE_RESET)
    def reset(self, request: NodeReset) -> None:
        """Forget recorded state (all, or some packages) between windows, once per id (workflows.node_reset)."""
        if request.id in self._seen:
            return
        self._seen.add(request.id)
        self._resets.append(request)
        self._changed = True

    @workflow.signal(name=names.SIGNAL_WINDOW_CANCEL)
    async def window_cancel(self, cancel: WindowCancel) -> None:
        """Withdraw a fleet's request that has not started (a running window finishes and answers)."""
        queued = self._fleet_queue.get(cancel.fleet_workflow_id)
        if queued is None or queued.request_id != cancel.request_id:
            return
        del self._fleet_queue[cancel.fleet_workflow_id]
        self._changed = True
        await self._answer_fleet(cancel.fleet_workflow_id, WindowResult(
            node=self._node(), request_id=cancel.request_id, withdrawn=True, message="withdrawn by the fleet"))

    @workflow.signal(name=SIGNAL_NODE_REQUEST)
    async def request(self, request: NodeRequest) -> None:
        """Queue a request; duplicates (same request_id) are dropped, a newer one replaces a queued one."""
        if request.request_id and request.request_id in self._seen:
            return
        if request.request_id:
            self._seen.add(request.request_id)
        self._changed = True
        held = self._held.get(request.package)
        if held is not None:
            if held.spec == request.spec and held.generation == request.generation:
                # Same spec as the one that failed: it waits for `retry`; remember the newest sender.
                self._held[request.package] = request
                return
            del self._held[request.package]
        replaced = self._pending.get(request.package)
        self._pending[request.package] = request
        if replaced is not None and replaced.rollout_workflow_id != request.rollout_workflow_id:
            await self._answer(replaced, NodeResult(
                node=self._node(), package=replaced.package,
                version=str(replaced.spec.get("version", "")), request_id=replaced.request_id,
                state=State.SKIPPED.value, message=f"superseded by a request from {request.rollout_workflow_id}"))

    @workflow.signal(name=SIGNAL_NODE_CANCEL)
    def cancel(self, cancel: NodeCancel) -> None:
        """Drop a rollout's queued (not yet started) request for a package."""
        for queue in (self._pending, self._held):
            request = queue.get(cancel.package)
            if request is not None and request.rollout_workflow_id == cancel.rollout_workflow_id:
                del queue[cancel.package]
        self._changed = True

    @workflow.signal(name=SIGNAL_NODE_RETRY)
    def retry(self) -> None:
        """Re-run every package that ended erroring (from the Temporal UI or `noderoll retry`)."""
        self._retry = True
        self._changed = True

    @workflow.signal(name=SIGNAL_LEASE_GRANTED)
    def lease_granted(self, grant: LeaseGrant) -> None:
        """A budget granted one of our lease requests."""
        self._grants.add(grant.lease_id)

    @workflow.query(name=QUERY_NODE_STATUS)
    def status(self) -> dict[str, Any]:
        """Phase, queued and held packages, windows run and the last result per package."""
        return {
            "phase": self._phase,
            "pending": sorted(self._pending),
            "fleets": list(self._fleet_queue),
            "held": sorted(self._held),
            "windows": self._windows,
            "results": {n: r.state for n, r in sorted(self._last_results.items())},
        }

    # --- windows ----------------------------------------------------------------------------

    def _set_phase(self, phase: str) -> None:
        if phase == self._phase:
            return
        self._phase = phase
        workflow.upsert_search_attributes([PHASE_KEY.value_set(phase)])
        workflow.set_current_details(f"{phase}: queued {sorted(self._pending) or 'nothing'}, "
                                     f"erroring {sorted(self._held) or 'nothing'}")

    def _node(self) -> str:
        return workflow.info().workflow_id.removeprefix(NODE_WORKFLOW_PREFIX)

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > HISTORY_EVENT_LIMIT

    async def _answer_fleet(self, fleet_workflow_id: str, result: WindowResult) -> None:
        try:
            await workflow.get_external_workflow_handle(fleet_workflow_id).signal(
                names.SIGNAL_WINDOW_RESULT, result)
        except Exception as err:  # noqa: BLE001 - a fleet that ended no longer needs the answer
            workflow.logger.info("window result not delivered to %s: %s", fleet_workflow_id, err)

    async def _fleet_window(self, input: NodeWorkflowInput, request: WindowRequest) -> None:
        """One window for every Package of a fleet's request; answered exactly once."""
        carried = sorted({*self._carried, *(o.name for o in request.packages)})
        if carried != self._carried:
            self._carried = carried
            workflow.upsert_search_attributes([PACKAGE_KEY.value_set(carried)])
        for order in request.packages:
            # A legacy per-Package request for the same Package is superseded by the fleet's.
            for queue in (self._pending, self._held):
                old = queue.pop(order.name, None)
                if old is not None:
                    await self._answer(old, NodeResult(
                        node=input.node, package=old.package, version=str(old.spec.get("version", "")),
                        request_id=old.request_id, state=State.SKIPPED.value,
                        message=f"superseded by {request.fleet_workflow_id}"))
        snapshot = await self._read_node(input.node)
        if snapshot is None and self._node_missing:
            result = WindowResult(input.node, request.request_id, message=f"node {input.node} does not exist")
            for order in request.packages:
                result.outcomes[order.name] = PackageOutcome(
                    State.BLOCKED.value, str(order.spec.get("version", "")), message=result.message)
        elif snapshot is None:
            # The API was unreachable: keep the request queued (first in line) and try again.
            self._fleet_queue = {request.fleet_workflow_id: request, **self._fleet_queue}
            return
        else:
            self._windows += 1
            self._set_phase("Running")
            result = await run_fleet_window(FleetWindowCall(
                input, request, snapshot, f"{workflow.info().run_id[:8]}-{self._windows}", self._grants,
                self._set_phase))
        self._set_phase("Idle")
        await self._answer_fleet(request.fleet_workflow_id, result)

    async def _answer(self, request: NodeRequest, result: NodeResult) -> None:
        self._last_results[request.package] = result
        try:
            await workflow.get_external_workflow_handle(request.rollout_workflow_id).signal(
                SIGNAL_NODE_RESULT, result)
        except Exception as err:  # noqa: BLE001 - a rollout that ended no longer needs the answer
            workflow.logger.info("result for %s not delivered to %s: %s", request.package,
                                 request.rollout_workflow_id, err)

    async def _answer_now(self, request: NodeRequest, state: State, message: str) -> None:
        del self._pending[request.package]
        await self._answer(request, NodeResult(
            node=self._node(), package=request.package,
            version=str(request.spec.get("version", "")), request_id=request.request_id,
            state=state.value, message=message))

    async def _read_node(self, node: str) -> ReadNodeResult | None:
        self._node_missing = False
        try:
            return await workflow.execute_activity(
                "read_node", NodeInput(node), result_type=ReadNodeResult,
                start_to_close_timeout=API_TIMEOUT, retry_policy=API_RETRY, summary="read node")
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == errors.NODE_NOT_FOUND:
                self._node_missing = True
                for request in list(self._pending.values()):
                    await self._answer_now(request, State.BLOCKED, f"node {node} does not exist")
                self._held.clear()
                return None
            # The API is unreachable beyond the activity's retries: keep the queue and try again later.
            workflow.logger.warning("reading node %s failed, retrying in %s: %s", node, READ_RETRY_DELAY, err)
            await workflow.sleep(READ_RETRY_DELAY)
            return None

    async def _window(self, input: NodeWorkflowInput) -> bool:
        """Plan and run one window; False when nothing queued can run now."""
        snapshot = await self._read_node(input.node)
        if snapshot is None:
            return True
        recorded, problem = parse_node_state(snapshot.state_annotation)
        if problem and workflow.patched(PATCH_HOLD_UNREADABLE_STATE):
            await self._hold(input.node, problem)
            return True
        if problem:
            workflow.logger.warning("node %s: %s; treating as nothing recorded", input.node, problem)
        specs: dict[str, PackageSpec] = {}
        for name, request in sorted(self._pending.items()):
            try:
                specs[name] = PackageSpec.model_validate(request.spec)
            except ValidationError as err:
                await self._answer_now(request, State.ERRORING, f"{errors.INVALID_SPEC}: {err}")
        uninstall = frozenset(n for n, r in self._pending.items() if r.uninstall)
        # Runs recorded before the fix of issue #12 (a complete config change taken for an
        # unfinished one) replay with the rule they ran with.
        legacy = not workflow.patched(CONFIG_STAGE_ON_CONFIG_CHANGE)
        plan = plan_node(NodePlanInput(node=input.node, recorded=recorded, desired=specs, uninstall=uninstall,
                                       legacy_resume=legacy))
        if plan.error:
            for request in list(self._pending.values()):
                await self._answer_now(request, State.BLOCKED, plan.error)
            return True
        answered = False
        for name, package_plan in sorted(plan.packages.items()):
            if not package_plan.has_work and not package_plan.blocked:
                await self._answer_now(self._pending[name], State.COMPLETE, package_plan.reason or "up to date")
                answered = True
        if not plan.windows:
            return answered
        window = plan.windows[0]
        requests = {name: self._pending.pop(name) for name in window.packages}
        self._windows += 1
        self._set_phase("Running")
        run = WindowRun(WindowContext(
            settings=input, key=f"{workflow.info().run_id[:8]}-{self._windows}", snapshot=snapshot,
            recorded=recorded, plan=plan, window=window, requests=requests,
            specs={n: specs[n] for n in window.packages}, grants=self._grants, set_phase=self._set_phase,
        ))
        outcome = await run.execute()
        for name, result in sorted(outcome.results.items()):
            if result.state == State.ERRORING.value and name not in self._pending and not outcome.node_gone:
                self._held[name] = requests[name]
            await self._answer(requests[name], result)
        self._set_phase("Erroring" if self._held else "Idle")
        return True

    async def _hold(self, node: str, problem: str) -> None:
        """The state cannot be read: answer every queued request `blocked` (held), write nothing over it."""
        reason = held_reason(problem)
        workflow.logger.warning("node %s: %s", node, reason)
        for request in list(self._pending.values()):
            del self._pending[request.package]
            await self._answer(request, NodeResult(
                node=node, package=request.package, version=str(request.spec.get("version", "")),
                request_id=request.request_id, state=State.BLOCKED.value, message=reason, held=True))
        await mark_nodes([NodeMark(node, NodeMarkKind.STATE_MALFORMED, reason)])
