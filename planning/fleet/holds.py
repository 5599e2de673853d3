"""What holds a fleet's next batch: maintenance windows and analysis gates. Pure (machine steps over a
`FleetRun`).

Every decision is a function of `planning/rollout/maintenance.py` and `planning/rollout/gates.py`; these steps sequence
them, with waits (`planning.fleet.acts.wait`) and gate samples (`QueryGate`, the activity `query_prometheus`):

* before a batch is handed out (`held`): the gates of the evaluation point (after the canary's
  soak, between batches) are sampled until they pass; outside the maintenance windows the fleet
  reports `Waiting` with the next opening and sleeps until it (a re-list follows); continuous gates
  need a fresh good sample;
* while windows are out: continuous gates are sampled every `intervalSeconds`, and when the
  maintenance window closes the requests that have not started are withdrawn (`window_cancel`:
  node windows already running finish);
* a failed gate halts the fleet (`fs.apply_halt`) with the gate, its query, the value and the time
  in the fleet's message and progress. A policy with neither windows nor gates issues no command
  here.
"""

from __future__ import annotations

from api.analysis import AnalysisGate
from api.enums import CanaryPhase, GateWhen, RolloutPhase
from planning.fleet.acts import wait, withdraw
from planning.fleet.commands import GateSample, QueryGate
from planning.fleet.run import ONE_SECOND, FleetRun, Steps
from planning.rollout import batches, maintenance
from planning.rollout import fleet_state as fs
from planning.rollout import gates as gate_rules
from protocol.activities import QueryPrometheusResult
from protocol.fleet import Filter

# --- maintenance windows -------------------------------------------------------------------------


def _wait_for_window(run: FleetRun) -> Steps[bool]:
    """Outside the windows: phase `Waiting`, sleep until the next opening. True when it waited."""
    state, windows, now = run.state, run.policy.maintenance_windows, run.now
    if maintenance.is_open(windows, now):
        state.next_window = ""
        return False
    opening = maintenance.next_opening(windows, now)
    state.next_window = opening.isoformat() if opening else ""
    state.message = (f"outside the maintenance windows; the next opens {maintenance.describe_opening(opening, windows)}"
                     if opening else "outside the maintenance windows; none opens within a week")
    yield from run.set_phase(RolloutPhase.WAITING)
    if not (yield from wait(run, opening - now if opening else None)):
        # The window opened: list the nodes again before the batch (hours may have passed).
        run.resolved = False
    return True


def withdraw_outside_windows(run: FleetRun) -> Steps[None]:
    """The maintenance window closed while requests are out: withdraw those that have not started."""
    if run.state.in_flight and not run.windows_open():
        run.to_withdraw.update(run.state.in_flight)
        yield from withdraw(run)


# --- analysis gates ------------------------------------------------------------------------


def held(run: FleetRun) -> Steps[bool]:
    """Before the next batch (module docstring); True when something held it (it waited or sampled)."""
    policy = run.policy
    if policy.analysis and (yield from gates_hold(run)):
        return True
    if policy.maintenance_windows and (yield from _wait_for_window(run)):
        return True
    return bool(gate_rules.continuous_gates(policy.analysis)) and (yield from _continuous_hold(run))


def open_gates(run: FleetRun, was_canary: bool, planner: batches.BatchPlannerState) -> None:
    """After a batch was evaluated: open the evaluation point of the gates, when work is left."""
    state, gates = run.state, run.policy.analysis
    if not gates or planner.halted or not fs.remaining(state):
        return
    if was_canary:
        if planner.canary_phase in (CanaryPhase.SOAKING, CanaryPhase.PASSED):
            gate_rules.open_point(state.gates, gates, GateWhen.AFTER_CANARY)
        return
    gate_rules.open_point(state.gates, gates, GateWhen.BETWEEN_BATCHES)


def gates_hold(run: FleetRun) -> Steps[bool]:
    """Sample the gates of the open evaluation point; True while they hold the fleet."""
    state, gates = run.state, run.policy.analysis
    book = state.gates
    if gate_rules.point_passed(book):
        return False
    due = gate_rules.point_due(book, gates, run.now)
    for gate in due:
        outcome = yield from _sample(gate)
        failure = gate_rules.record_point(book, gate, outcome, run.now)
        if failure is not None:
            yield from _gate_failed(run, failure)
            return True
    if due:
        return True  # judged again on the next turn of the loop (messages first)
    following = gate_rules.next_sample(book.tracks)
    if book.point == GateWhen.BETWEEN_BATCHES.value:
        yield from run.set_working_phase()  # after the canary the phase stays Canary
    state.message = gate_rules.summary(book, gates) + (f"; next sample at {following.isoformat()}"
                                                       if following else "")
    yield from wait(run, following - run.now if following else None)
    return True


def sample_continuous(run: FleetRun) -> Steps[bool]:
    """Sample the continuous gates that are due; True when one failed (the fleet halts)."""
    state, gates = run.state, run.policy.analysis
    if not gates:
        return False
    for gate in gate_rules.continuous_due(state.gates, gates, run.now):
        outcome = yield from _sample(gate)
        failure = gate_rules.record_continuous(state.gates, gate, outcome, run.now)
        if failure is not None:
            yield from _gate_failed(run, failure)
            return True
    return False


def _continuous_hold(run: FleetRun) -> Steps[bool]:
    """Before a batch: every continuous gate needs a fresh good sample; True while it holds."""
    if (yield from sample_continuous(run)):
        return True
    book, gates = run.state.gates, run.policy.analysis
    if gate_rules.continuous_clear(book, gates, run.now):
        return False
    bad = [f"{g.name} (value {book.continuous[g.name].last_value})" for g in gate_rules.continuous_gates(gates)
           if g.name in book.continuous and not book.continuous[g.name].last_ok]
    following = gate_rules.next_sample(book.continuous)
    yield from run.set_working_phase()
    run.state.message = (f"next batch waits for continuous gate(s) {', '.join(bad)}"
                         + (f"; next sample at {following.isoformat()}" if following else ""))
    yield from wait(run, max(following - run.now, ONE_SECOND) if following else None)
    return True


def _sample(gate: AnalysisGate) -> Steps[gate_rules.SampleOutcome]:
    """One instant query of `gate`, judged against its condition (a simulation answers with the outcome it
    assumes)."""
    sample: GateSample | gate_rules.SampleOutcome = yield QueryGate(gate)
    if isinstance(sample, gate_rules.SampleOutcome):
        return sample
    if sample.error or not isinstance(sample.result, QueryPrometheusResult):
        return gate_rules.judge(gate.condition, None, sample.error or "no result")
    return gate_rules.judge(gate.condition, sample.result)


def _gate_failed(run: FleetRun, failure: gate_rules.GateFailure) -> Steps[None]:
    """Halt the fleet for a failed gate (requests not started are withdrawn, windows running finish)."""
    state = run.state
    run.to_withdraw.update(fs.apply_halt(state, Filter()))
    state.message = (f"halted: {gate_rules.failure_text(failure)}; signal resume to go on (overrides the gate "
                     "once) or retry to evaluate it again")
    yield from run.log(state.message, warning=True)
