"""Drain-ahead of one fleet run: mark the nodes expected next, hold their windows until the marks are old
enough. Pure (machine steps over a `FleetRun`; the marks are written by the command `MarkUpcoming`).

Every decision is `planning.rollout.drain_ahead.plan` over the fleet's state; these steps gather its input (the
batch nodes the fleet may hand over now, the predicted next batch, `planning.rollout.fleet_state.preview_next`,
and when it is expected) and keep its result: `FleetState.upcoming`, `FleetRun.ahead_ready` (the nodes
whose windows may start) and `FleetRun.ahead_wake` (when the marks next change; the fleet's waits end
then). A policy without `drainAhead` and a fleet without marks issue no command here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from api.enums import CanaryPhase, Promotion
from planning.fleet.commands import Failed, MarkUpcoming
from planning.fleet.run import RESPECT_PATCH, FleetRun, Steps
from planning.rollout import batches, drain_ahead
from planning.rollout import fleet_state as fs
from protocol.activities import MarkUpcomingNodesInput, MarkUpcomingNodesResult

# After marks failed for good: when to try again (the nodes they concern wait meanwhile).
MARK_AGAIN = timedelta(seconds=30)


def active(run: FleetRun) -> bool:
    """The policy asks for drain-ahead, or marks of an earlier policy are still to remove."""
    return run.policy.drain_ahead is not None or bool(run.state.upcoming)


def _to_send(run: FleetRun) -> list[str]:
    """Nodes of the batch out that the fleet would hand over now and has not."""
    state = run.state
    planner = state.planner
    if (planner is None or not planner.current or state.paused or state.halted or state.rollback is not None
            or not run.windows_open()):
        return []
    startable = fs.startable(state)
    return [n for n in planner.current_batch if n in startable]


def _next(run: FleetRun, seconds: int, to_send: list[str]) -> tuple[list[str], datetime | None]:
    """The predicted next batch and when it is expected to start (module docstring of planning.rollout.drain_ahead)."""
    state = run.state
    planner = state.planner
    if planner is None or state.paused or state.halted or state.rollback is not None or state.wave_wanted:
        return [], None
    manual = planner.canary_promotion is Promotion.MANUAL
    if planner.current:
        if to_send or (planner.canary_phase is CanaryPhase.RUNNING and manual):
            return [], None  # the batch out is not all handed over yet, or a promotion waits for a person
        soak = planner.canary_soak_seconds if planner.canary_phase is CanaryPhase.RUNNING else 0
        sent = max((state.in_flight[n].sent_at for n in planner.current_batch if n in state.in_flight), default="")
        # Every window of the batch answered: the next batch comes as soon as the batch is judged.
        start = drain_ahead.expected_start(sent or run.stamp(), state.window_seconds if sent else [], soak)
    elif planner.canary_phase is CanaryPhase.SOAKING and state.soak_until and not manual:
        start = datetime.fromisoformat(state.soak_until)
    elif batches.planner_phase(planner, fs.remaining(state)) is batches.PlannerPhase.READY and run.windows_open():
        start = run.now  # between two batches: the next one is planned now (the marks stay)
    else:
        return [], None
    if start is None or run.now < start - timedelta(seconds=seconds):
        return [], start
    # The prediction is made once per batch (and canary phase): it is a copy of the planner run ahead.
    key = f"{state.wave}:{planner.batch_number}:{planner.canary_phase.value}:{bool(planner.current)}"
    if run.ahead_preview_for != key:
        run.ahead_preview = fs.preview_next(state, run.policy, run.patches.get(RESPECT_PATCH, False))
        run.ahead_preview_for = key
    return run.ahead_preview, start


def _held(run: FleetRun) -> set[str]:
    """Nodes held back at hand-out that still want a window (they keep their marks)."""
    state = run.state
    return set(state.held) & fs.startable(state) if state.held else set()


def sync(run: FleetRun) -> Steps[None]:
    """Write the marks the rules want now (no command when nothing changes), and note what is ready."""
    state = run.state
    if not active(run):
        run.ahead_wake, run.ahead_ready = None, []
        return
    settings = run.policy.drain_ahead
    seconds = settings.seconds if settings is not None and state.spec and state.spec.packages else 0
    to_send = _to_send(run)
    preview, start = _next(run, seconds, to_send) if seconds else ([], None)
    planned = drain_ahead.plan(drain_ahead.AheadInput(
        seconds=seconds, now=run.now, marked=dict(state.upcoming), in_flight=set(state.in_flight),
        to_send=to_send, next_batch=preview, next_start=start, last_write=run.ahead_written,
        held=_held(run)))
    run.ahead_ready, run.ahead_wake = planned.ready, planned.wake_at
    if not planned.mark and not planned.unmark:
        return
    result: MarkUpcomingNodesResult | Failed = yield MarkUpcoming(MarkUpcomingNodesInput(
        run.fleet_id, planned.mark, planned.unmark, bool(settings and settings.taint)))
    if isinstance(result, Failed):
        # Not fatal: unmarked nodes only wait (no window starts before its mark), so try again later.
        yield from run.log(f"drain-ahead marks failed: {result.reason}", warning=True)
        run.ahead_wake = run.now + MARK_AGAIN
        return
    now = run.now
    run.ahead_written = now
    for node in planned.unmark:
        state.upcoming.pop(node, None)
    for node in result.marked:
        state.upcoming[node] = now.isoformat()
    if result.marked:
        # Newly marked nodes start their S seconds now.
        matured = now + timedelta(seconds=seconds)
        run.ahead_wake = matured if run.ahead_wake is None else min(run.ahead_wake, matured)


def sendable(run: FleetRun, nodes: list[str]) -> Steps[list[str]]:
    """Of `nodes` (a batch's nodes to hand over), those whose windows may start now; marks written first."""
    if not active(run):
        return nodes
    yield from sync(run)
    ready = set(run.ahead_ready)
    return [n for n in nodes if n in ready]
