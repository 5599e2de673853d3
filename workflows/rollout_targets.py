"""Target resolution and requests of a rollout (`package/<name>`): list, plan, re-resolve, hand over. Deterministic.

`RolloutTargets` is the part of `workflows.rollout.RolloutWorkflow` that turns a listing of the
fleet (activity `list_target_nodes`) into the rollout's targets (`planning.targets.select_targets`)
and keeps them current:
* `_plan_from_scratch`: a new planner (start, spec change, uninstall); nodes already at the spec
  count as done;
* `_refresh_nodes`: after `nodes_changed`, the periodic re-list and (strict rollouts) before every
  batch: joiners are added to the planner, taint blocks and dependency waits refreshed, and a node
  that stopped being a target (relabelled out of the selector, ignored, deleted) before it was
  updated is reported as departed and never requested;
* `_send` and `_withdraw`: hand nodes their `NodeRequest` (activity `request_node_windows`,
  signal-with-start on `node/<node>`), or withdraw the requests in flight (`cancel`).

Strict rollouts (started after the patch `PATCH_WINDOWS_IN_FLIGHT`) pass their requests in flight
to target selection (a node our own window reboots stays a target) and check `dependsOn` there.

Rollouts started after the patch `PATCH_MARK_BLOCKED` (`Rules.marks`) also hold nodes whose state
annotation cannot be read (`planning.targets`), show every blocked node as such on the node itself
after each listing (`workflows.node_marks.mark_listed`: label `blocked`, the StateMalformed condition and
Event), and request again a node that comes back from blocked (or from outside the listing) with
work to do, even if it finished before: its record changed meanwhile, the record decides.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.io import ListTargetNodesInput, ListTargetNodesResult, RequestNodeWindowsInput
    from api import keys
    from api.policy import DEFAULT_COMPARTMENT
    from planning import batches
    from planning.compartments import package_identity
    from planning.targets import NodeView, TargetQuery, TargetSelection, select_targets
    from workflows.messages import (
        SIGNAL_NODE_CANCEL,
        SIGNAL_NODE_RETRY,
        BudgetRef,
        NodeCancel,
        NodeRequest,
        RolloutInput,
    )
    from workflows.node_marks import mark_listed
    from workflows.rollout_state import RolloutState

# The rollout calls `workflow.patched` with this once per run (`Rules.strict`): True for runs started by this code.
PATCH_WINDOWS_IN_FLIGHT = "rollout-windows-in-flight-and-targets-per-batch"
# Likewise (`Rules.marks`): hold unreadable node states and mark blocked nodes (module docstring).
PATCH_MARK_BLOCKED = "rollout-hold-unreadable-state-and-mark-blocked-nodes"
ACTIVITY_TIMEOUT = timedelta(minutes=5)
# Requests per `request_node_windows` call: keeps each activity payload well under 2 MB.
REQUEST_CHUNK = 50
DEPARTED_REASON = "no longer a target (left the selector, ignored or deleted) before it was updated"


class RolloutTargets:
    """Listing, target bookkeeping and requests; mixed into `RolloutWorkflow`, which owns the state."""

    _input: RolloutInput
    _state: RolloutState

    def _set_working_phase(self) -> None:
        raise NotImplementedError  # RolloutWorkflow._set_working_phase

    async def _select(self) -> TargetSelection:
        state = self._state
        assert state.spec is not None
        # Cleared before listing: a change reported while the listing runs asks for another one.
        state.relist_requested = False
        listing = await workflow.execute_activity(
            "list_target_nodes",
            ListTargetNodesInput(package=self._input.package, also=sorted(state.spec.depends_on)),
            result_type=ListTargetNodesResult,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            summary="list nodes",
        )
        state.listed_at = workflow.now()
        state.resolved = True
        views = [NodeView(n.name, n.labels, n.taints, n.state_annotation, n.status_label, n.state_malformed)
                 for n in listing.nodes]
        query = TargetQuery(self._input.package, state.spec, views, state.carry.uninstalling,
                            hold_malformed=state.rules.marks)
        if state.rules.strict:
            query = TargetQuery(query.package, query.spec, query.nodes, query.uninstall,
                                in_flight=frozenset(state.carry.in_flight), check_dependencies=True,
                                hold_malformed=state.rules.marks)
        selection = select_targets(query)
        if state.rules.marks:
            await mark_listed(views, selection)
        return selection

    async def _plan_from_scratch(self) -> None:
        """New planner (start, spec change, uninstall); nodes already at the spec count as done."""
        state = self._state
        state.replan, state.relist = False, False
        carry = state.carry
        if carry.in_flight and carry.uninstalling:
            await self._withdraw()
        kept: dict[str, str] = {}
        if state.rules.strict:
            # Requests for the same package spec (a policy or generation change, a spec resent by a
            # bridge) stay in flight: their nodes are neither requested again nor counted done early.
            # Requests for another spec are superseded by the new plan's (the node keeps the newest).
            if state.keep_in_flight and not carry.uninstalling:
                kept = dict(carry.in_flight)
            carry.in_flight = dict(kept)
            state.keep_in_flight = False
        selection = await self._select()
        assert state.spec is not None
        identity = package_identity(self._input.package, state.spec.version)
        if carry.uninstalling:
            identity += "/uninstall"
        carry.planner = batches.new_planner(batches.PlannerInput(state.policy, selection.eligible, identity))
        if state.version != state.spec.version:
            carry.node_order = {}  # a new version is a new rollout order: its first node is 0 again
        # The reported version changes only with the plan, so `progress` never mixes old counts and new version.
        state.version = state.spec.version
        carry.epoch += 1
        carry.in_flight = kept
        carry.eligible = [n.name for n in selection.eligible]
        carry.outcomes = {node: "complete" for node in selection.done}
        carry.messages = {}
        carry.blocked = selection.blocked
        carry.waiting = selection.waiting
        carry.departed = {}
        carry.soak_until = ""

    async def _refresh_nodes(self) -> None:
        """Pick up joining nodes, forget vanished ones, refresh taint blocks and dependency waits."""
        state = self._state
        state.relist = False
        carry, planner = state.carry, state.carry.planner
        assert planner is not None
        selection = await self._select()
        known = set(carry.eligible)
        new = [n for n in selection.eligible if n.name not in known]
        if new:
            batches.add_nodes(planner, state.policy, new)
            workflow.logger.info("%s: %d node(s) joined", self._input.package, len(new))
        for node in selection.done:
            if node not in known:
                carry.outcomes[node] = "complete"
        if state.rules.marks:
            # Back from blocked (or from outside the listing) with work to do: an outcome from before
            # (complete, then its state was garbled and removed) no longer says what the node records.
            done = set(selection.done)
            for node in new:
                if node.name not in done and node.name not in carry.in_flight:
                    carry.outcomes.pop(node.name, None)
                    carry.messages.pop(node.name, None)
        if state.rules.strict:
            self._note_departed(known, selection)
        carry.eligible = [n.name for n in selection.eligible]
        carry.blocked = selection.blocked
        carry.waiting = selection.waiting

    def _note_departed(self, known: set[str], selection: TargetSelection) -> None:
        """Targets that are gone from the listing (not blocked, not waiting) before they were updated."""
        carry = self._state.carry
        still = {n.name for n in selection.eligible} | set(selection.blocked) | set(selection.waiting)
        for node in sorted(known - still):
            if carry.outcomes.get(node) != "complete" and node not in carry.departed:
                carry.departed[node] = DEPARTED_REASON
                workflow.logger.info("%s: node %s %s", self._input.package, node, DEPARTED_REASON)
        for node in still:
            carry.departed.pop(node, None)

    # --- acting ------------------------------------------------------------------------------

    async def _send(self, nodes: list[str]) -> None:
        """Hand `nodes` their requests (signal-with-start through an activity), then retry signals."""
        state = self._state
        if not nodes:
            return
        carry, planner = state.carry, state.carry.planner
        assert planner is not None
        requests = []
        for node in nodes:
            compartment = planner.compartment_of(node) or DEFAULT_COMPARTMENT
            policy = state.policy_name or f"package:{self._input.package}"
            requests.append(NodeRequest(
                rollout_workflow_id=workflow.info().workflow_id,
                package=self._input.package,
                spec=state.spec_json,
                generation=state.generation,
                budget=BudgetRef(policy, compartment, batches.budget_limit(planner, compartment)),
                request_id=state.book.request_id(node),
                uninstall=carry.uninstalling,
                node_order=carry.node_order.setdefault(node, len(carry.node_order)),
            ))
            carry.in_flight[node] = requests[-1].request_id
        self._set_working_phase()
        for start in range(0, len(nodes), REQUEST_CHUNK):
            await workflow.execute_activity(
                "request_node_windows",
                RequestNodeWindowsInput(
                    requests=requests[start:start + REQUEST_CHUNK],
                    nodes=nodes[start:start + REQUEST_CHUNK],
                    task_queue=self._input.node_task_queue,
                ),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=60),
                summary=f"request {len(nodes[start:start + REQUEST_CHUNK])} node window(s)",
            )
        for node in [n for n in nodes if n in carry.retry_nodes]:
            carry.retry_nodes.remove(node)
            await self._signal_node(node, SIGNAL_NODE_RETRY, None)

    async def _withdraw(self) -> None:
        """Withdraw every request in flight (halt, delete): only requests not yet started are dropped."""
        cancel = NodeCancel(workflow.info().workflow_id, self._input.package)
        for node in sorted(self._state.carry.in_flight):
            await self._signal_node(node, SIGNAL_NODE_CANCEL, cancel)
        self._state.carry.in_flight.clear()

    async def _signal_node(self, node: str, signal: str, payload: Any) -> None:
        handle = workflow.get_external_workflow_handle(keys.node_workflow_id(node))
        try:
            await (handle.signal(signal) if payload is None else handle.signal(signal, payload))
        except Exception as err:  # noqa: BLE001 - a node workflow that ended holds nothing of ours
            workflow.logger.info("signal %s to node %s not delivered: %s", signal, node, err)
