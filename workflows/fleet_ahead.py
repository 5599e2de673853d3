"""Drain-ahead of one fleet run: mark the nodes expected next, hold their windows until the marks are old
enough. Deterministic, no I/O (the marks are written by the activity `mark_upcoming_nodes`).

`FleetAhead` acts on the `FleetRun` it is given. Every decision is `planning.drain_ahead.plan` over
the fleet's state; this module gathers its input (the batch nodes the fleet may hand over now, the
predicted next batch, `planning.fleet_state.preview_next`, and when it is expected) and writes the
result: `FleetState.upcoming`, `FleetRun.ahead_ready` (the nodes whose windows may start) and
`FleetRun.ahead_wake` (when the marks next change; the fleet's waits end then).

A policy without `drainAhead` and a fleet without marks issue no command here, so histories recorded
before drain-ahead replay unchanged.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from api.enums import CanaryPhase, Promotion
    from planning import batches, drain_ahead
    from planning import fleet_state as fs
    from protocol.activities import MarkUpcomingNodesInput, MarkUpcomingNodesResult
    from workflows.api_retries import outlasting
    from workflows.fleet_run import FleetRun

MARK_TIMEOUT = timedelta(minutes=5)
# Marks are retried through an apiserver outage like the window's calls (`workflows.api_retries`).
MARK_RETRY = outlasting(timedelta(seconds=2), timedelta(seconds=30))
# After marks failed for good: when to try again (the nodes they concern wait meanwhile).
MARK_AGAIN = timedelta(seconds=30)


class FleetAhead:
    """Drain-ahead's marks of one fleet run."""

    def __init__(self, run: FleetRun) -> None:
        self.run = run

    def active(self) -> bool:
        """The policy asks for drain-ahead, or marks of an earlier policy are still to remove."""
        return self.run.policy.drain_ahead is not None or bool(self.run.state.upcoming)

    def _to_send(self) -> list[str]:
        """Nodes of the batch out that the fleet would hand over now and has not."""
        run, state = self.run, self.run.state
        planner = state.planner
        if (planner is None or not planner.current or state.paused or state.halted or state.rollback is not None
                or not run.windows_open()):
            return []
        startable = fs.startable(state)
        return [n for n in planner.current_batch if n in startable]

    def _next(self, seconds: int, to_send: list[str]) -> tuple[list[str], datetime | None]:
        """The predicted next batch and when it is expected to start (module docstring of planning.drain_ahead)."""
        run, state = self.run, self.run.state
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
            start = drain_ahead.expected_start(sent or workflow.now().isoformat(),
                                               state.window_seconds if sent else [], soak)
        elif planner.canary_phase is CanaryPhase.SOAKING and state.soak_until and not manual:
            start = datetime.fromisoformat(state.soak_until)
        elif batches.planner_phase(planner, fs.remaining(state)) is batches.PlannerPhase.READY and run.windows_open():
            start = workflow.now()  # between two batches: the next one is planned now (the marks stay)
        else:
            return [], None
        if start is None or workflow.now() < start - timedelta(seconds=seconds):
            return [], start
        # The prediction is made once per batch (and canary phase): it is a copy of the planner run ahead.
        key = f"{state.wave}:{planner.batch_number}:{planner.canary_phase.value}:{bool(planner.current)}"
        if run.ahead_preview_for != key:
            run.ahead_preview, run.ahead_preview_for = fs.preview_next(state, run.policy), key
        return run.ahead_preview, start

    async def sync(self) -> None:
        """Write the marks the rules want now (no command when nothing changes), and note what is ready."""
        run, state = self.run, self.run.state
        if not self.active():
            run.ahead_wake, run.ahead_ready = None, []
            return
        settings = run.policy.drain_ahead
        seconds = settings.seconds if settings is not None and state.spec and state.spec.packages else 0
        to_send = self._to_send()
        preview, start = self._next(seconds, to_send) if seconds else ([], None)
        planned = drain_ahead.plan(drain_ahead.AheadInput(
            seconds=seconds, now=workflow.now(), marked=dict(state.upcoming), in_flight=set(state.in_flight),
            to_send=to_send, next_batch=preview, next_start=start, last_write=run.ahead_written))
        run.ahead_ready, run.ahead_wake = planned.ready, planned.wake_at
        if not planned.mark and not planned.unmark:
            return
        try:
            result = await workflow.execute_activity(
                "mark_upcoming_nodes",
                MarkUpcomingNodesInput(run.fleet_id, planned.mark, planned.unmark, bool(settings and settings.taint)),
                result_type=MarkUpcomingNodesResult, start_to_close_timeout=MARK_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=60), retry_policy=MARK_RETRY,
                summary=f"mark {len(planned.mark)} node(s) upcoming, unmark {len(planned.unmark)}",
            )
        except ActivityError as err:
            # Not fatal: unmarked nodes only wait (no window starts before its mark), so try again later.
            workflow.logger.warning("%s: drain-ahead marks failed: %s", run.fleet_id, err)
            run.ahead_wake = workflow.now() + MARK_AGAIN
            return
        now = workflow.now()
        run.ahead_written = now
        for node in planned.unmark:
            state.upcoming.pop(node, None)
        for node in result.marked:
            state.upcoming[node] = now.isoformat()
        if result.marked:
            # Newly marked nodes start their S seconds now.
            matured = now + timedelta(seconds=seconds)
            run.ahead_wake = matured if run.ahead_wake is None else min(run.ahead_wake, matured)

    async def sendable(self, nodes: list[str]) -> list[str]:
        """Of `nodes` (a batch's nodes to hand over), those whose windows may start now; marks written first."""
        if not self.active():
            return nodes
        await self.sync()
        ready = set(self.run.ahead_ready)
        return [n for n in nodes if n in ready]
