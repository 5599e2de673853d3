"""The fleet taking its inbox: the bridge's desired state, operator signals, node changes, node answers,
reruns and the global workflow's turns, applied in arrival order. Pure (a machine step: `FleetRun`).
"""

from __future__ import annotations

from api.enums import RolloutPhase
from planning.clusters import cluster_turns as turns
from planning.fleet.messages import (
    Answer,
    AvailabilityChanged,
    Desired,
    NodesChanged,
    Operator,
    RerunAsked,
    TurnGiven,
)
from planning.fleet.run import FleetRun, Steps
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_rerun import STAGES, rerun_from_annotation
from protocol import names
from protocol.fleet import FleetSpec, Rerun


def apply_inbox(run: FleetRun) -> Steps[None]:
    """Apply every queued message, in arrival order."""
    inbox, run.inbox = run.inbox, []
    for message in inbox:
        if isinstance(message, Desired):
            yield from _take_spec(run, message.spec)
        elif isinstance(message, Operator):
            yield from _operator(run, message)
        elif isinstance(message, NodesChanged):
            run.relist = True
        elif isinstance(message, AvailabilityChanged):
            run.availability_changed.update(message.nodes)
        elif isinstance(message, Answer):
            if fs.record_result(run.state, message.result, run.stamp()):
                run.withdrawing.discard(message.result.node)
        elif isinstance(message, RerunAsked):
            yield from _take_rerun(run, message.request)
        elif isinstance(message, TurnGiven) and turns.take_turn(run.state.turns, message.turn, run.change()):
            yield from run.log(message.turn.message)


def _take_rerun(run: FleetRun, request: Rerun) -> Steps[None]:
    if request.stage not in STAGES and request.id not in run.state.rerun_ids:
        run.state.message = f"rerun {request.id} of {request.package} refused: unknown stage {request.stage!r}"
        yield from run.log(run.state.message, warning=True)
    elif fs.apply_rerun(run.state, request):
        yield from run.log(f"rerun {request.id} of {request.package} from {request.stage or 'the start'}")
        run.resolved = False


def _operator(run: FleetRun, message: Operator) -> Steps[None]:
    state = run.state
    if message.signal == names.SIGNAL_PAUSE:
        fs.apply_pause(state, message.scope)
    elif message.signal == names.SIGNAL_RESUME:
        fs.apply_resume(state, message.scope)
    elif message.signal == names.SIGNAL_HALT:
        run.to_withdraw.update(fs.apply_halt(state, message.scope))
    elif message.signal == names.SIGNAL_RETRY:
        retried = fs.apply_retry(state, message.scope)
        yield from run.log(f"retry {retried or 'nothing'}")
        run.resolved = False


def _take_spec(run: FleetRun, spec: FleetSpec) -> Steps[None]:
    state = run.state
    before = state.spec
    paused_before = {e.name: e.paused for e in (before.packages if before else [])}
    if {e.name: e.paused for e in spec.packages} != paused_before and state.planner is not None:
        # A Package paused or resumed by its spec or annotation: which nodes want it changes now.
        run.relist_now = True
    if fs.set_spec(state, spec):
        # Never report the previous wave's Complete while the new one is being planned.
        yield from run.set_phase(RolloutPhase.PENDING)
    if before is None or before.policy != spec.policy:
        yield from run.set_policy()
    yield from run.show_packages()
    for entry in spec.packages:
        # The `noderoll.io/rerun` annotation; its id is taken once (repeated desired states ignore it).
        asked = rerun_from_annotation(entry.name, entry.rerun)
        if asked is not None:
            yield from _take_rerun(run, asked)
