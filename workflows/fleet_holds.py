"""What holds a fleet's next batch: maintenance windows and analysis gates. Deterministic, no I/O.

`FleetHolds` acts on the `FleetRun` it is given and waits and withdraws through its `FleetActs`.
Every decision is a pure function of `planning/maintenance.py` and `planning/gates.py`; this module
only sequences them, with durable timers (`FleetActs.wait`: `workflow.wait_condition` with a timeout)
and the activity `query_prometheus`:

* before a batch is handed out (`held`): the gates of the evaluation point (after the canary's
  soak, between batches) are sampled until they pass; outside the maintenance windows the fleet
  reports `Waiting` with the next opening and sleeps until it (a re-list follows); continuous gates
  need a fresh good sample;
* while windows are out: continuous gates are sampled every `intervalSeconds`, and when the
  maintenance window closes the requests that have not started are withdrawn (`window_cancel`:
  node windows already running finish);
* a failed gate halts the fleet (`fs.apply_halt`) with the gate, its query, the value and the time
  in the fleet's message and progress. A policy with neither windows nor gates issues no command
  here, so histories recorded without them replay unchanged.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

with workflow.unsafe.imports_passed_through():
    from api.analysis import AnalysisGate
    from api.enums import CanaryPhase, GateWhen, RolloutPhase
    from planning import batches, maintenance
    from planning import fleet_state as fs
    from planning import gates as gate_rules
    from protocol.activities import QueryPrometheusInput, QueryPrometheusResult
    from protocol.errors import PROMETHEUS_NOT_CONFIGURED, PROMETHEUS_QUERY_ERROR, PROMETHEUS_RESULT_TYPE
    from protocol.fleet import Filter
    from workflows.fleet_acts import FleetActs
    from workflows.fleet_run import ONE_SECOND, FleetRun

# An unreachable Prometheus is asked four times (1, 2 and 4 s apart), then the gate fails with the reason.
GATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(seconds=10),
    maximum_attempts=4,
    non_retryable_error_types=[PROMETHEUS_QUERY_ERROR, PROMETHEUS_RESULT_TYPE, PROMETHEUS_NOT_CONFIGURED],
)
GATE_QUERY_TIMEOUT = timedelta(seconds=60)


class FleetHolds:
    """Maintenance windows and analysis gates of one fleet run."""

    def __init__(self, run: FleetRun, acts: FleetActs) -> None:
        self.run = run
        self.acts = acts

    # --- maintenance windows -------------------------------------------------------------------

    async def _wait_for_window(self) -> bool:
        """Outside the windows: phase `Waiting`, sleep until the next opening. True when it waited."""
        state, windows, now = self.run.state, self.run.policy.maintenance_windows, workflow.now()
        if maintenance.is_open(windows, now):
            state.next_window = ""
            return False
        opening = maintenance.next_opening(windows, now)
        state.next_window = opening.isoformat() if opening else ""
        state.message = (f"outside the maintenance windows; the next opens {maintenance.describe_opening(opening, windows)}"
                         if opening else "outside the maintenance windows; none opens within a week")
        self.run.set_phase(RolloutPhase.WAITING)
        if not await self.acts.wait(opening - now if opening else None):
            # The window opened: list the nodes again before the batch (hours may have passed).
            self.run.resolved = False
        return True

    async def withdraw_outside_windows(self) -> None:
        """The maintenance window closed while requests are out: withdraw those that have not started."""
        if self.run.state.in_flight and not self.run.windows_open():
            self.run.to_withdraw.update(self.run.state.in_flight)
            await self.acts.withdraw()

    # --- analysis gates ------------------------------------------------------------------------

    async def held(self) -> bool:
        """Before the next batch (module docstring); True when something held it (it waited or sampled)."""
        policy = self.run.policy
        if policy.analysis and await self.gates_hold():
            return True
        if policy.maintenance_windows and await self._wait_for_window():
            return True
        return bool(gate_rules.continuous_gates(policy.analysis)) and await self._continuous_hold()

    def open_gates(self, was_canary: bool, planner: batches.BatchPlannerState) -> None:
        """After a batch was evaluated: open the evaluation point of the gates, when work is left."""
        state, gates = self.run.state, self.run.policy.analysis
        if not gates or planner.halted or not fs.remaining(state):
            return
        if was_canary:
            if planner.canary_phase in (CanaryPhase.SOAKING, CanaryPhase.PASSED):
                gate_rules.open_point(state.gates, gates, GateWhen.AFTER_CANARY)
            return
        gate_rules.open_point(state.gates, gates, GateWhen.BETWEEN_BATCHES)

    async def gates_hold(self) -> bool:
        """Sample the gates of the open evaluation point; True while they hold the fleet."""
        state, gates = self.run.state, self.run.policy.analysis
        book = state.gates
        if gate_rules.point_passed(book):
            return False
        due = gate_rules.point_due(book, gates, workflow.now())
        for gate in due:
            failure = gate_rules.record_point(book, gate, await self._sample(gate), workflow.now())
            if failure is not None:
                self._gate_failed(failure)
                return True
        if due:
            return True  # judged again on the next turn of the loop (messages first)
        following = gate_rules.next_sample(book.tracks)
        if book.point == GateWhen.BETWEEN_BATCHES.value:
            self.run.set_working_phase()  # after the canary the phase stays Canary
        state.message = gate_rules.summary(book, gates) + (f"; next sample at {following.isoformat()}"
                                                           if following else "")
        await self.acts.wait(following - workflow.now() if following else None)
        return True

    async def sample_continuous(self) -> bool:
        """Sample the continuous gates that are due; True when one failed (the fleet halts)."""
        state, gates = self.run.state, self.run.policy.analysis
        if not gates:
            return False
        for gate in gate_rules.continuous_due(state.gates, gates, workflow.now()):
            failure = gate_rules.record_continuous(state.gates, gate, await self._sample(gate), workflow.now())
            if failure is not None:
                self._gate_failed(failure)
                return True
        return False

    async def _continuous_hold(self) -> bool:
        """Before a batch: every continuous gate needs a fresh good sample; True while it holds."""
        if await self.sample_continuous():
            return True
        book, gates = self.run.state.gates, self.run.policy.analysis
        if gate_rules.continuous_clear(book, gates, workflow.now()):
            return False
        bad = [f"{g.name} (value {book.continuous[g.name].last_value})" for g in gate_rules.continuous_gates(gates)
               if g.name in book.continuous and not book.continuous[g.name].last_ok]
        following = gate_rules.next_sample(book.continuous)
        self.run.set_working_phase()
        self.run.state.message = (f"next batch waits for continuous gate(s) {', '.join(bad)}"
                                  + (f"; next sample at {following.isoformat()}" if following else ""))
        await self.acts.wait(max(following - workflow.now(), ONE_SECOND) if following else None)
        return True

    async def _sample(self, gate: AnalysisGate) -> gate_rules.SampleOutcome:
        """One instant query of `gate` (activity `query_prometheus`), judged against its condition."""
        try:
            result = await workflow.execute_activity(
                "query_prometheus", QueryPrometheusInput(gate.query, gate.address or "", gate.name),
                result_type=QueryPrometheusResult, start_to_close_timeout=GATE_QUERY_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=30), retry_policy=GATE_RETRY,
                summary=f"gate {gate.name}: {gate.query}"[:200],
            )
        except ActivityError as err:
            cause = err.cause
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            if err.retry_state is RetryState.MAXIMUM_ATTEMPTS_REACHED:
                reason += f" (gave up after {GATE_RETRY.maximum_attempts} attempts)"
            return gate_rules.judge(gate.condition, None, reason)
        return gate_rules.judge(gate.condition, result)

    def _gate_failed(self, failure: gate_rules.GateFailure) -> None:
        """Halt the fleet for a failed gate (requests not started are withdrawn, windows running finish)."""
        state = self.run.state
        self.run.to_withdraw.update(fs.apply_halt(state, Filter()))
        state.message = (f"halted: {gate_rules.failure_text(failure)}; signal resume to go on (overrides the gate "
                         "once) or retry to evaluate it again")
        workflow.logger.warning("%s: %s", self.run.fleet_id, state.message)
