"""The fleet machine run ahead on a simulated fleet: what `noderoll plan` and the ETA show. Pure.

`simulate` drives `planning.fleet.machine.FleetMachine` (the fleet workflow's own decisions, not a copy)
and answers its commands itself, on a simulated clock:

* listings and fresh reads come from a `World` (`planning.views.worlds`): the Nodes of a snapshot, or
  the fleet's own view of its nodes, with the simulated windows' effects on them;
* each window handed out takes the time the world says (the fleet's measured p50 for its kind, else
  `planning.views.eta.DEFAULTS`) and answers as a window that succeeded; while it runs its node is in a
  window (down for floors and topology limits), afterwards it is up and its Packages are done;
* a new batch's windows start one measured (or default) gap after its hand-out; waits (a
  canary's soak, drain-ahead's lead, a maintenance window, a gate's next sample, a re-list) take their
  simulated time;
* assumed: every window succeeds, every gate sample passes, a canary awaiting manual promotion is
  promoted, `global/<policy>` grants each change set when it is reported (`Simulation.assumed` says which
  of these the run met), and nothing outside the fleet changes a node.

The run stops when the wave is done (phase Complete or Failed, nothing out), when the fleet halts, when it
would wait for ever, or past `SimulationLimits`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from api.enums import CanaryPhase, RolloutPhase
from planning.fleet import commands as c
from planning.fleet.machine import FleetMachine
from planning.fleet.messages import Answer, Operator, TurnGiven
from planning.fleet.run import FleetRun
from planning.rollout import gates as gate_rules
from planning.rollout.fleet_state import InFlight
from planning.views.eta import gap_seconds
from protocol import names
from protocol.activities import (
    DescribeWorkflowRunsResult,
    ListFleetNodesInput,
    ListFleetNodesResult,
    MarkUpcomingNodesResult,
    ReadNodeSupplyInput,
    ReadNodeSupplyResult,
)
from protocol.clusters import GlobalTurn
from protocol.fleet import Filter, FleetInput, WindowRequest, WindowResult

ASSUMED_PROMOTION = "a canary awaiting manual promotion is promoted (signal resume)"
ASSUMED_TURN = "global/<policy> grants this cluster its turn when the change set is reported"
ASSUMED_GATES = "every analysis gate sample passes"
DONE_PHASES = (RolloutPhase.COMPLETE, RolloutPhase.FAILED)
# Waits in a row with nothing out after which a run stops (a fleet that only re-lists).
IDLE_WAITS = 1_000
# `Simulation.stopped` when `SimulationLimits.windows` windows answered (or `handouts` hand-outs were made).
WINDOWS_LIMIT = "limit: windows"


class World(Protocol):
    """The simulated fleet's nodes: what listings and reads find, and what a window does."""

    def listing(self, input: ListFleetNodesInput) -> ListFleetNodesResult:
        """A `list_fleet_nodes` answer for the nodes as they are now."""

    def read(self, input: ReadNodeSupplyInput) -> ReadNodeSupplyResult:
        """A `read_node_supply` answer for the nodes as they are now."""

    def open_window(self, node: str, request: WindowRequest) -> tuple[float, WindowResult]:
        """The window of `request` starts on `node`: how long it takes (seconds) and its answer."""

    def resume_window(self, node: str, flight: InFlight) -> tuple[float, WindowResult]:
        """A window that was out when the simulation began: its full duration and its answer."""

    def close_window(self, node: str, result: WindowResult) -> None:
        """The window answered: its node is up again and what completed there is done."""


@dataclass(frozen=True)
class SimulationLimits:
    """Where a simulation gives up: simulated time, commands carried out, and (0: none) windows answered or
    hand-outs made."""

    horizon: timedelta = timedelta(days=366)
    commands: int = 1_000_000
    windows: int = 0
    handouts: int = 0


@dataclass
class HandOut:
    """One hand-out of windows as the simulation saw it (a `RequestWindows` command)."""

    # Seconds after the simulation's start.
    at: float
    # The planner's batch number then, and whether it was the canary.
    batch: int
    canary: bool
    # Node -> its compartment, in the order handed out.
    nodes: dict[str, str] = field(default_factory=dict)


@dataclass
class Simulation:
    """What the simulated run did."""

    handouts: list[HandOut] = field(default_factory=list)
    # Node -> each request it got (in order) and its answers.
    requests: dict[str, list[WindowRequest]] = field(default_factory=dict)
    # Seconds after the start when the run stopped (the wave's end when `stopped` is "done").
    end: float = 0.0
    # Seconds after the start when the windows out at the start had all answered (0: none was out).
    running_end: float = 0.0
    # "done", "halted", "waits: <why>", or "limit: <which>".
    stopped: str = ""
    # What the run assumed that may not happen (module docstring).
    assumed: list[str] = field(default_factory=list)
    # The most windows out at once.
    peak: int = 0
    phase: RolloutPhase = RolloutPhase.PENDING
    # Seconds after the start when each window answered, in order (`SimulationLimits.windows` counts them).
    answered: list[float] = field(default_factory=list)


class _Driver:
    """Answers the machine's commands on the simulated clock (module docstring)."""

    def __init__(self, run: FleetRun, world: World, start: datetime, limits: SimulationLimits) -> None:
        self.run, self.world, self.start, self.limits = run, world, start, limits
        self.machine = FleetMachine(run)
        self.clock = start
        self.sim = Simulation()
        self.sequence = 0
        # (finish time, sequence, node, answer) of every window out.
        self.out: list[tuple[datetime, int, str, WindowResult]] = []
        self.running_ids: set[str] = set()
        # Waits in a row that ended with nothing out and nothing answered.
        self.idle = 0
        # The planner's batch number at the last hand-out (None: none yet), and the measured gap between
        # batches as the run began (the simulated hand-outs add gaps of their own to the copy's timings).
        self.last_batch: int | None = None
        self.gap = gap_seconds(run.state.timings)

    def seconds(self) -> float:
        return (self.clock - self.start).total_seconds()

    def assume(self, what: str) -> None:
        if what not in self.sim.assumed:
            self.sim.assumed.append(what)

    def schedule(self, node: str, seconds: float, result: WindowResult) -> None:
        self.sequence += 1
        heapq.heappush(self.out, (self.clock + timedelta(seconds=max(seconds, 0.0)), self.sequence, node, result))
        self.sim.peak = max(self.sim.peak, len(self.out))

    def resume_running(self) -> None:
        """Windows out when the simulation begins end their remaining time from their hand-over."""
        for node, flight in sorted(self.run.state.in_flight.items()):
            seconds, result = self.world.resume_window(node, flight)
            sent = datetime.fromisoformat(flight.sent_at) if flight.sent_at else self.clock
            self.schedule(node, seconds - (self.clock - sent).total_seconds(), result)
            self.running_ids.add(result.request_id)

    def deliver(self, until: datetime) -> bool:
        """Every window ending by `until` answers (the clock moves to the last of them); True if any did."""
        delivered = False
        while self.out and self.out[0][0] <= until:
            at, _seq, node, result = heapq.heappop(self.out)
            self.clock = max(self.clock, at)
            self.world.close_window(node, result)
            self.machine.receive(Answer(result))
            self.sim.answered.append(self.seconds())
            self.running_ids.discard(result.request_id)
            if not self.running_ids and not self.sim.running_end:
                self.sim.running_end = self.seconds()
            delivered = True
        return delivered

    def wait(self, command: c.Wait) -> bool | None:
        """A `Wait`'s answer; None when the simulation stops here."""
        run = self.run
        if run.inbox:
            return True
        planner = run.state.planner
        if not self.out and not run.state.in_flight:
            if run.phase in DONE_PHASES:
                self.sim.stopped = "done"
                return None
            if run.phase is RolloutPhase.HALTED:
                self.sim.stopped = "halted"
                return None
            if planner is not None and planner.canary_phase is CanaryPhase.AWAITING_PROMOTION:
                self.assume(ASSUMED_PROMOTION)
                self.machine.receive(Operator(names.SIGNAL_RESUME, Filter()))
                return True
            if run.phase is RolloutPhase.WAITING and not run.state.next_window:
                # Floors or topology limits hold every node and nothing of this fleet is out to free them.
                self.sim.stopped = f"waits: {run.state.message}"
                return None
            self.idle += 1
            if self.idle > IDLE_WAITS:
                self.sim.stopped = f"limit: nothing happens ({run.state.message or run.phase.value})"
                return None
        target = self.clock + command.timeout if command.timeout is not None else None
        if self.out and (target is None or self.out[0][0] <= target):
            self.idle = 0
            return self.deliver(self.out[0][0])
        if target is None:
            self.sim.stopped = f"waits: {run.state.message or 'for a message'}"
            return None
        if target - self.start > self.limits.horizon:
            self.sim.stopped = "limit: simulated time"
            return None
        self.clock = target
        return False

    def hand_over(self, command: c.RequestWindows) -> None:
        self.idle = 0
        planner = self.run.state.planner
        gap = 0.0
        number = planner.batch_number if planner else 0
        if number != self.last_batch and not self.out:
            # A new batch starts one gap after the last (listing, gates, hand-over): its windows start that late.
            gap = self.gap
        self.last_batch = number
        canary = planner is not None and planner.canary_phase is CanaryPhase.RUNNING
        handout = HandOut(self.seconds() + gap, planner.batch_number if planner else 0, canary)
        for node, request in zip(command.nodes, command.requests, strict=True):
            handout.nodes[node] = (planner.compartment_of(node) if planner else None) or ""
            self.sim.requests.setdefault(node, []).append(request)
            seconds, result = self.world.open_window(node, request)
            self.schedule(node, gap + seconds, result)
        self.sim.handouts.append(handout)

    def answer(self, command: c.Command) -> Any:
        """The answer of every command but `Wait` (module docstring)."""
        if isinstance(command, c.Patched):
            return True  # the simulation runs today's rules
        if isinstance(command, c.ListNodes):
            return self.world.listing(command.input)
        if isinstance(command, c.ReadSupply):
            return self.world.read(command.input)
        if isinstance(command, c.RequestWindows):
            self.hand_over(command)
            return None
        if isinstance(command, c.DescribeRuns):
            return DescribeWorkflowRunsResult()
        if isinstance(command, c.MarkUpcoming):
            return MarkUpcomingNodesResult(marked=list(command.input.mark), unmarked=list(command.input.unmark))
        if isinstance(command, c.QueryGate):
            self.assume(ASSUMED_GATES)
            return gate_rules.SampleOutcome(True, "assumed to pass")
        if isinstance(command, c.ReportToGlobal):
            report = command.input.report
            if report.change and not report.ended:
                self.assume(ASSUMED_TURN)
                self.machine.receive(TurnGiven(GlobalTurn(report.change, True, "granted (simulated)")))
            return None
        return None  # effects, marks, withdrawals, waits for handlers

    def drive(self, input: FleetInput) -> Simulation:
        command = self.machine.start(input, self.clock)
        self.resume_running()
        for _ in range(self.limits.commands):
            if isinstance(command, c.Complete | c.ContinueAsNew):
                self.sim.stopped = "done"
                break
            if ((self.limits.windows and len(self.sim.answered) >= self.limits.windows)
                    or (self.limits.handouts and len(self.sim.handouts) >= self.limits.handouts)):
                self.sim.stopped = WINDOWS_LIMIT
                break
            if isinstance(command, c.HistoryFull):
                answer: Any = False
            elif isinstance(command, c.Wait):
                answer = self.wait(command)
                if answer is None:
                    break
            else:
                answer = self.answer(command)
            command = self.machine.feed(answer, self.clock)
        else:
            self.sim.stopped = "limit: commands"
        self.sim.end = self.seconds()
        self.sim.phase = self.run.phase
        return self.sim


def simulate(run: FleetRun, world: World, start: datetime, input: FleetInput | None = None,
             limits: SimulationLimits = SimulationLimits()) -> Simulation:
    """Run the machine over `run` (its state, policy and inbox as given) on `world` from `start`."""
    return _Driver(run, world, start, limits).drive(input or FleetInput(policy_name=run.input.policy_name,
                                                                       cluster=run.input.cluster))

