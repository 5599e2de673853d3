"""A fleet's window on one node: every Package of the request in ONE window. Deterministic, no I/O.

Called by the node workflow for each `WindowRequest` (`workflows/node.py`). Plans the node with
`planning.node_plan` in `one_window` mode (dependency order, one merged interrupt, configInterrupts
included), answers Packages with nothing to do or that cannot run, runs the window with the
shared sequencer `workflows.node_window.WindowRun` (no budget leases: the fleet caps its windows
by the compartment budgets itself, ADR 0007) and turns its results into one `WindowResult`.

A node whose `noderoll.io/state` cannot be read is held: every Package is answered `blocked` with
the reason, nothing runs, the annotation stays as it is for an operator to inspect, and the node is
marked (condition `noderoll.io/StateMalformed`, a Warning Event, label `blocked`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.io import ReadNodeResult
    from api.enums import NodeMarkKind, State
    from api.node_state import held_reason, parse_node_state
    from api.package import PackageSpec
    from planning.node_marks import NodeMark
    from planning.node_plan import NodePlanInput, plan_node
    from protocol import errors
    from protocol.fleet import PackageOutcome, WindowRequest, WindowResult
    from workflows.messages import NodeRequest, NodeWorkflowInput
    from workflows.node_marks import mark_nodes
    from workflows.node_window import WindowContext, WindowRun



def _all(request: WindowRequest, state: State, message: str) -> dict[str, PackageOutcome]:
    return {o.name: PackageOutcome(state.value, str(o.spec.get("version", "")), message=message)
            for o in request.packages}


@dataclass
class FleetWindowCall:
    """What the node workflow hands over for one fleet window."""

    settings: NodeWorkflowInput
    request: WindowRequest
    snapshot: ReadNodeResult
    # Unique per window within the node workflow (Job names, Event keys).
    key: str
    grants: set[str]
    set_phase: Callable[[str], None]


async def run_fleet_window(call: FleetWindowCall) -> WindowResult:
    """Plan and run one window for every Package of `call.request` on the node of `call.snapshot`."""
    settings, request, snapshot = call.settings, call.request, call.snapshot
    node = settings.node
    recorded, problem = parse_node_state(snapshot.state_annotation)
    if problem:
        # Held: nothing runs, nothing is written over the annotation; the node shows why.
        reason = held_reason(problem)
        await mark_nodes([NodeMark(node, NodeMarkKind.STATE_MALFORMED, reason)])
        return WindowResult(node, request.request_id, _all(request, State.BLOCKED, reason))
    outcomes: dict[str, PackageOutcome] = {}
    specs: dict[str, PackageSpec] = {}
    for order in request.packages:
        try:
            specs[order.name] = PackageSpec.model_validate(order.spec)
        except ValidationError as err:
            outcomes[order.name] = PackageOutcome(State.ERRORING.value, str(order.spec.get("version", "")),
                                                  message=f"{errors.INVALID_SPEC}: {err}")
    uninstall = frozenset(o.name for o in request.packages if o.uninstall and o.name in specs)
    # `noderoll rerun`: Packages the fleet asks to run again although they are complete (node_plan rules).
    rerun = {o.name: o.rerun_stage for o in request.packages if o.rerun and o.name in specs}
    plan = plan_node(NodePlanInput(node=node, recorded=recorded, desired=specs, uninstall=uninstall,
                                   one_window=True, rerun=rerun))
    if plan.error:
        return WindowResult(node, request.request_id, _all(request, State.BLOCKED, plan.error))
    for name, package_plan in sorted(plan.packages.items()):
        if package_plan.blocked:
            outcomes[name] = PackageOutcome(State.BLOCKED.value, package_plan.version, message=package_plan.blocked)
        elif not package_plan.has_work:
            outcomes[name] = PackageOutcome(State.COMPLETE.value, package_plan.version,
                                            message=package_plan.reason or "up to date")
    if not plan.windows:
        return WindowResult(node, request.request_id, outcomes)
    window = plan.windows[0]
    generations = {o.name: o.generation for o in request.packages}
    requests = {
        name: NodeRequest(rollout_workflow_id=request.fleet_workflow_id, package=name, spec=specs[name].dump(),
                          generation=generations[name], request_id=request.request_id, uninstall=name in uninstall,
                          node_order=request.node_order)
        for name in window.packages
    }
    run = WindowRun(WindowContext(
        settings=settings, key=call.key, snapshot=snapshot, recorded=recorded, plan=plan, window=window,
        requests=requests, specs={n: specs[n] for n in window.packages}, grants=call.grants,
        set_phase=call.set_phase,
    ))
    outcome = await run.execute()
    for name, result in sorted(outcome.results.items()):
        outcomes[name] = PackageOutcome(result.state, result.version, result.stage, result.message, result.log_tail)
    interrupt = window.interrupt.type.value if run.interrupted and window.interrupt is not None else ""
    return WindowResult(node, request.request_id, outcomes, cordoned=run.cordoned, drained=run.drained,
                        interrupt=interrupt)
