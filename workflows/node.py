"""The per-node workflow `node/<node>`: the single writer of one node's noderoll state. Deterministic.

Rollouts hand it requests by signal-with-start (`request`, a `NodeRequest`); it queues them (one per
package: a newer request replaces a queued one, whose sender is told `skipped`), and runs node
windows (`workflows/node_window.py`) until nothing is queued, then completes, so every window's
history stays small and the next request starts a fresh run. See docs/adr/0004-node-workflow.md.

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

    from activities import errors
    from activities.io import NodeInput, ReadNodeResult
    from api.enums import NodeMarkKind, State
    from api.keys import NODE_WORKFLOW_PREFIX, SEARCH_ATTR_NODE, SEARCH_ATTR_PHASE
    from api.node_state import held_reason, parse_node_state
    from api.package import PackageSpec
    from planning.node_marks import NodeMark
    from planning.node_plan import NodePlanInput, plan_node
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
    from workflows.node_marks import mark_nodes
    from workflows.node_window import (
        API_RETRY,
        API_TIMEOUT,
        CONFIG_STAGE_ON_CONFIG_CHANGE,
        WindowContext,
        WindowRun,
    )

NODE_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTR_NODE)
PHASE_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTR_PHASE)
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

    @workflow.run
    async def run(self, input: NodeWorkflowInput) -> None:
        """Run windows until no request is queued (or held erroring), then complete."""
        for request in input.pending:
            self._pending.setdefault(request.package, request)
        for request in input.held:
            self._held.setdefault(request.package, request)
        workflow.upsert_search_attributes([NODE_KEY.value_set(input.node)])
        while True:
            if self._retry:
                self._retry = False
                self._pending.update({n: r for n, r in self._held.items() if n not in self._pending})
                self._held.clear()
            if not self._pending:
                if not self._held:
                    # Complete only when no handler runs and, right before returning, nothing is queued.
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    if not self._pending and not self._held and not self._retry:
                        self._set_phase("Idle")
                        return
                    continue
                self._set_phase("Erroring")
                await workflow.wait_condition(lambda: self._retry or bool(self._pending))
                continue
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(dataclasses.replace(
                    input, pending=list(self._pending.values()), held=list(self._held.values())))
            self._changed = False
            if not await self._window(input):
                # Everything queued waits for a dependency: wait for news (a request, retry, cancel).
                self._set_phase("Waiting")
                await workflow.wait_condition(lambda: self._changed or self._retry)

    # --- messages ---------------------------------------------------------------------------

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
        try:
            return await workflow.execute_activity(
                "read_node", NodeInput(node), result_type=ReadNodeResult,
                start_to_close_timeout=API_TIMEOUT, retry_policy=API_RETRY, summary="read node")
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == errors.NODE_NOT_FOUND:
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
