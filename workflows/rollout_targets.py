"""Target resolution of a rollout (`package/<name>`): list the Nodes, plan, re-resolve. Deterministic.

`RolloutTargets` is the part of `workflows.rollout.RolloutWorkflow` that turns a listing of the
fleet (activity `list_target_nodes`) into the rollout's targets (`planning.targets.select_targets`)
and keeps them current:
* `_plan_from_scratch`: a new planner (start, spec change, uninstall); nodes already at the spec
  count as done;
* `_refresh_nodes`: after `nodes_changed`, the periodic re-list and (strict rollouts) before every
  batch: joiners are added to the planner, taint blocks and dependency waits refreshed, and a node
  that stopped being a target (relabelled out of the selector, ignored, deleted) before it was
  updated is reported as departed and never requested.

Strict rollouts (started after the patch `PATCH_WINDOWS_IN_FLIGHT`) pass their requests in flight
to target selection (a node our own window reboots stays a target) and check `dependsOn` there.

Rollouts started after the patch `PATCH_MARK_BLOCKED` (`_marks`) also hold nodes whose state
annotation cannot be read (`planning.targets`), show every blocked node as such on the node itself
after each listing (`workflows.node_marks.mark_listed`: label `blocked`, the StateMalformed condition and
Event), and request again a node that comes back from blocked (or from outside the listing) with
work to do, even if it finished before: its record changed meanwhile, the record decides.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.io import ListTargetNodesInput, ListTargetNodesResult
    from api.package import PackageSpec
    from api.policy import DeploymentPolicySpec
    from planning import batches
    from planning.compartments import package_identity
    from planning.targets import NodeView, TargetQuery, TargetSelection, select_targets
    from workflows.messages import RolloutCarry, RolloutInput
    from workflows.node_marks import mark_listed
    from workflows.rollout_state import NodeBook

# The rollout calls `workflow.patched` with this once per run: True for runs started by this code.
PATCH_WINDOWS_IN_FLIGHT = "rollout-windows-in-flight-and-targets-per-batch"
# Likewise (`_marks`): hold unreadable node states and mark blocked nodes (module docstring).
PATCH_MARK_BLOCKED = "rollout-hold-unreadable-state-and-mark-blocked-nodes"
ACTIVITY_TIMEOUT = timedelta(minutes=5)
DEPARTED_REASON = "no longer a target (left the selector, ignored or deleted) before it was updated"


class RolloutTargets:
    """Listing and target bookkeeping; mixed into `RolloutWorkflow`, which owns the attributes."""

    _input: RolloutInput
    _carry: RolloutCarry
    _book: NodeBook
    _spec: PackageSpec | None
    _policy: DeploymentPolicySpec
    _version: str
    _replan: bool
    _relist: bool
    _listed_at: datetime
    _relist_requested: bool
    _strict: bool
    _marks: bool
    # Targets were re-resolved since the last batch was handed over (strict rollouts list before each batch).
    _resolved: bool
    # The spec change being applied left the package spec as it was (only generation or policy changed).
    _keep_in_flight: bool

    async def _withdraw(self) -> None:
        raise NotImplementedError  # RolloutWorkflow._withdraw

    async def _select(self) -> TargetSelection:
        assert self._spec is not None
        # Cleared before listing: a change reported while the listing runs asks for another one.
        self._relist_requested = False
        listing = await workflow.execute_activity(
            "list_target_nodes",
            ListTargetNodesInput(package=self._input.package, also=sorted(self._spec.depends_on)),
            result_type=ListTargetNodesResult,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            summary="list nodes",
        )
        self._listed_at = workflow.now()
        self._resolved = True
        views = [NodeView(n.name, n.labels, n.taints, n.state_annotation, n.status_label, n.state_malformed)
                 for n in listing.nodes]
        query = TargetQuery(self._input.package, self._spec, views, self._carry.uninstalling,
                            hold_malformed=self._marks)
        if self._strict:
            query = TargetQuery(query.package, query.spec, query.nodes, query.uninstall,
                                in_flight=frozenset(self._carry.in_flight), check_dependencies=True,
                                hold_malformed=self._marks)
        selection = select_targets(query)
        if self._marks:
            await mark_listed(views, selection)
        return selection

    async def _plan_from_scratch(self) -> None:
        """New planner (start, spec change, uninstall); nodes already at the spec count as done."""
        self._replan, self._relist = False, False
        carry = self._carry
        if carry.in_flight and carry.uninstalling:
            await self._withdraw()
        kept: dict[str, str] = {}
        if self._strict:
            # Requests for the same package spec (a policy or generation change, a spec resent by a
            # bridge) stay in flight: their nodes are neither requested again nor counted done early.
            # Requests for another spec are superseded by the new plan's (the node keeps the newest).
            if self._keep_in_flight and not carry.uninstalling:
                kept = dict(carry.in_flight)
            carry.in_flight = dict(kept)
            self._keep_in_flight = False
        selection = await self._select()
        assert self._spec is not None
        identity = package_identity(self._input.package, self._spec.version)
        if carry.uninstalling:
            identity += "/uninstall"
        carry.planner = batches.new_planner(batches.PlannerInput(self._policy, selection.eligible, identity))
        if self._version != self._spec.version:
            carry.node_order = {}  # a new version is a new rollout order: its first node is 0 again
        # The reported version changes only with the plan, so `progress` never mixes old counts and new version.
        self._version = self._spec.version
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
        self._relist = False
        carry, planner = self._carry, self._carry.planner
        assert planner is not None
        selection = await self._select()
        known = set(carry.eligible)
        new = [n for n in selection.eligible if n.name not in known]
        if new:
            batches.add_nodes(planner, self._policy, new)
            workflow.logger.info("%s: %d node(s) joined", self._input.package, len(new))
        for node in selection.done:
            if node not in known:
                carry.outcomes[node] = "complete"
        if self._marks:
            # Back from blocked (or from outside the listing) with work to do: an outcome from before
            # (complete, then its state was garbled and removed) no longer says what the node records.
            done = set(selection.done)
            for node in new:
                if node.name not in done and node.name not in carry.in_flight:
                    carry.outcomes.pop(node.name, None)
                    carry.messages.pop(node.name, None)
        if self._strict:
            self._note_departed(known, selection)
        carry.eligible = [n.name for n in selection.eligible]
        carry.blocked = selection.blocked
        carry.waiting = selection.waiting

    def _note_departed(self, known: set[str], selection: TargetSelection) -> None:
        """Targets that are gone from the listing (not blocked, not waiting) before they were updated."""
        carry = self._carry
        still = {n.name for n in selection.eligible} | set(selection.blocked) | set(selection.waiting)
        for node in sorted(known - still):
            if carry.outcomes.get(node) != "complete" and node not in carry.departed:
                carry.departed[node] = DEPARTED_REASON
                workflow.logger.info("%s: node %s %s", self._input.package, node, DEPARTED_REASON)
        for node in still:
            carry.departed.pop(node, None)
