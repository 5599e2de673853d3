"""What one run of `fleet/<policy>` holds, in one place: `FleetRun`. Deterministic, no I/O.

`FleetRun` is the run's state: its input, the fleet's memory (`planning.fleet_state.FleetState`,
carried through continue-as-new), the policy it runs under, its phase, the inbox the signal
handlers fill (one small dataclass per kind of message) and the loop's flags. The workflow
(`workflows/fleet.py`) and its helpers (`fleet_acts.py`, `fleet_holds.py`, `fleet_rollback.py`)
each receive the `FleetRun` they act on; none of them holds state of its own besides it.

`apply_inbox` applies the queued messages in arrival order: the bridge's desired state, operator
signals, `nodes_changed`, node answers and reruns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey

# Runs recorded before a rolling fleet re-listed on `nodes_changed` while rolling replay without it.
ROLLING_RELIST_PATCH = "rolling-relists-while-rolling"

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from api.enums import CanaryPhase, RolloutPhase
    from api.policy import DeploymentPolicySpec
    from planning import cluster_turns as turns
    from planning import fleet_state as fs
    from planning import gates as gate_rules
    from planning import maintenance, rolling
    from planning.compartments import DEFAULT_POLICY
    from planning.fleet_rerun import STAGES, rerun_from_annotation
    from planning.fleet_status import details_line
    from protocol import names
    from protocol.clusters import GlobalTurn
    from protocol.fleet import Filter, FleetInput, FleetSpec, Rerun, WindowResult
    from protocol.fleet_codec import state_to_json

PACKAGE_KEY = SearchAttributeKey.for_keyword_list(names.SEARCH_ATTR_PACKAGE)
PHASE_KEY = SearchAttributeKey.for_keyword(names.SEARCH_ATTR_PHASE)
HISTORY_EVENT_LIMIT = 10_000
HISTORY_BYTES_LIMIT = 8 * 1024 * 1024
# The earliest time (a listing or a watchdog round that has not happened yet).
NEVER = datetime.min.replace(tzinfo=UTC)
ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Desired:
    """Inbox: the bridge's new desired state."""

    spec: FleetSpec


@dataclass(frozen=True)
class Operator:
    """Inbox: an operator signal (`pause`, `resume`, `halt`, `retry`) and its filter."""

    signal: str
    scope: Filter


@dataclass(frozen=True)
class NodesChanged:
    """Inbox: the bridge saw Node changes that concern the fleet."""


@dataclass(frozen=True)
class Answer:
    """Inbox: a node workflow's answer."""

    result: WindowResult


@dataclass(frozen=True)
class RerunAsked:
    """Inbox: `rerun` (or the Package's `noderoll.io/rerun` annotation): run a complete Package again."""

    request: Rerun


@dataclass(frozen=True)
class TurnGiven:
    """Inbox: `global/<policy>`'s answer (its turn for a change set, the global view; ADR 0017)."""

    turn: GlobalTurn


Message = Desired | Operator | NodesChanged | Answer | RerunAsked | TurnGiven


@dataclass
class FleetRun:
    """Everything one run of a fleet holds (module docstring)."""

    # Set when the run starts (signal-with-start delivers `desired` before that: handlers only queue).
    input: FleetInput = field(default_factory=lambda: FleetInput(policy_name=""))
    state: fs.FleetState = field(default_factory=fs.FleetState)
    phase: RolloutPhase = RolloutPhase.PENDING
    policy: DeploymentPolicySpec = DEFAULT_POLICY
    inbox: list[Message] = field(default_factory=list)
    # `nodes_changed` arrived (a re-list is pending, rate-limited); one was queued and not listed yet;
    # a re-list is wanted at once (a user action), not rate-limited.
    relist: bool = False
    relist_requested: bool = False
    relist_now: bool = False
    listed_at: datetime = NEVER
    # Targets were listed since the last batch was handed over.
    resolved: bool = False
    # `NoderollPackage` as last upserted.
    packages_shown: list[str] = field(default_factory=list)
    # Nodes whose request must be withdrawn (halt), and those whose withdrawal was sent.
    to_withdraw: set[str] = field(default_factory=set)
    withdrawing: set[str] = field(default_factory=set)
    next_watchdog: datetime = NEVER
    # Drain-ahead (`workflows/fleet_ahead.py`): when its marks next change, the batch nodes whose mark is
    # old enough, the predicted next batch (and what it was predicted for), the last mark write.
    ahead_wake: datetime | None = None
    ahead_ready: list[str] = field(default_factory=list)
    ahead_preview: list[str] = field(default_factory=list)
    ahead_preview_for: str = ""
    ahead_written: datetime | None = None

    @property
    def fleet_id(self) -> str:
        return names.fleet_workflow_id(self.input.policy_name, self.input.cluster)

    def change(self) -> str:
        """The change set of the desired state (`planning.cluster_turns.change_id`; "" without one)."""
        spec = self.state.spec
        return turns.change_id({e.name: fs.package_revision(e) for e in spec.packages}) if spec else ""

    # --- phase and details ----------------------------------------------------------------------

    def set_phase(self, phase: RolloutPhase) -> None:
        """The phase (`NoderollPhase`) and the current-details line of the Temporal UI."""
        details = details_line(self.state, phase, self.fleet_id)
        if details != workflow.get_current_details():
            workflow.set_current_details(details)
        if phase is self.phase:
            return
        self.phase = phase
        workflow.upsert_search_attributes([PHASE_KEY.value_set(phase.value)])

    def set_working_phase(self) -> None:
        """The phase while the fleet works: uninstalling, paused, canary or progressing."""
        state = self.state
        planner = state.planner
        if any(e.uninstall for e in (state.spec.packages if state.spec else [])) and fs.remaining(state):
            self.set_phase(RolloutPhase.UNINSTALLING)
        elif state.paused:
            self.set_phase(RolloutPhase.PAUSED)
        elif planner is not None and planner.canary_phase is CanaryPhase.RUNNING:
            self.set_phase(RolloutPhase.CANARY)
        else:
            self.set_phase(RolloutPhase.PROGRESSING)

    def show_packages(self) -> None:
        """`NoderollPackage`: every Package the fleet carries (a keyword list)."""
        spec = self.state.spec
        names_now = sorted(e.name for e in spec.packages) if spec else []
        if names_now != self.packages_shown:
            self.packages_shown = names_now
            workflow.upsert_search_attributes([PACKAGE_KEY.value_set(names_now)])

    def set_policy(self) -> None:
        """Validate the desired state's policy; a policy that still fails keeps the last good one."""
        spec = self.state.spec
        if spec is None:
            return
        try:
            self.policy = DeploymentPolicySpec.model_validate(spec.policy) if spec.policy else DEFAULT_POLICY
        except ValidationError as err:
            # The bridge validates first.
            workflow.logger.warning("invalid policy for %s: %s", self.fleet_id, err)

    # --- timing -------------------------------------------------------------------------------

    def relist_wanted(self) -> bool:
        """A `nodes_changed` re-list is pending and useful now.

        While a batch is out, node changes (mostly our own windows' cordons and reboots) wait for
        the re-listing before the next batch instead of costing a listing each. A rolling fleet has no
        next batch (its windows are always out), so it re-lists as it rolls, at most every
        `RELIST_MIN_INTERVAL`: a node that joins, or whose blocking taint lifts (a new node's
        `node.kubernetes.io/not-ready`), is not left out until the known nodes are done.
        """
        planner = self.state.planner
        if planner is not None and planner.current and not self.state.halted:
            if not (rolling.rolls_now(planner) and workflow.patched(ROLLING_RELIST_PATCH)):
                return False
        return self.relist

    def windows_open(self) -> bool:
        """The policy's maintenance windows are open now (or it has none)."""
        return maintenance.is_open(self.policy.maintenance_windows, workflow.now())

    def hold_wakeups(self) -> list[timedelta]:
        """While windows are out: the close of the maintenance window and the next continuous gate sample."""
        state, now = self.state, workflow.now()
        if not state.in_flight:
            return []
        due = []
        close = maintenance.closes_at(self.policy.maintenance_windows, now)
        if close is not None:
            due.append(max(close - now, ONE_SECOND))
        sample = gate_rules.next_sample(state.gates.continuous) if self.policy.analysis else None
        if sample is not None:
            due.append(max(sample - now, ONE_SECOND))
        return due

    # --- continue-as-new ----------------------------------------------------------------------

    def should_continue_as_new(self) -> bool:
        info = workflow.info()
        limit = self.input.history_limit or HISTORY_EVENT_LIMIT
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > limit
            or info.get_current_history_size() > HISTORY_BYTES_LIMIT
        )

    def carry_over(self) -> FleetInput:
        """The next run's input: this one's, with the fleet's state."""
        return FleetInput(
            policy_name=self.input.policy_name,
            node_task_queue=self.input.node_task_queue,
            relist_seconds=self.input.relist_seconds,
            watchdog_seconds=self.input.watchdog_seconds,
            history_limit=self.input.history_limit,
            carry=state_to_json(self.state),
            cluster=self.input.cluster,
        )


# --- the inbox ---------------------------------------------------------------------------------


def apply_inbox(run: FleetRun) -> None:
    """Apply every queued message, in arrival order."""
    inbox, run.inbox = run.inbox, []
    for message in inbox:
        if isinstance(message, Desired):
            _take_spec(run, message.spec)
        elif isinstance(message, Operator):
            _operator(run, message)
        elif isinstance(message, NodesChanged):
            run.relist = True
        elif isinstance(message, Answer):
            if fs.record_result(run.state, message.result, workflow.now().isoformat()):
                run.withdrawing.discard(message.result.node)
        elif isinstance(message, RerunAsked):
            _take_rerun(run, message.request)
        elif isinstance(message, TurnGiven) and turns.take_turn(run.state.turns, message.turn, run.change()):
            workflow.logger.info("%s: %s", run.fleet_id, message.turn.message)


def _take_rerun(run: FleetRun, request: Rerun) -> None:
    if request.stage not in STAGES and request.id not in run.state.rerun_ids:
        run.state.message = f"rerun {request.id} of {request.package} refused: unknown stage {request.stage!r}"
        workflow.logger.warning("%s: %s", run.fleet_id, run.state.message)
    elif fs.apply_rerun(run.state, request):
        workflow.logger.info("%s: rerun %s of %s from %s", run.fleet_id, request.id, request.package,
                             request.stage or "the start")
        run.resolved = False


def _operator(run: FleetRun, message: Operator) -> None:
    state = run.state
    if message.signal == names.SIGNAL_PAUSE:
        fs.apply_pause(state, message.scope)
    elif message.signal == names.SIGNAL_RESUME:
        fs.apply_resume(state, message.scope)
    elif message.signal == names.SIGNAL_HALT:
        run.to_withdraw.update(fs.apply_halt(state, message.scope))
    elif message.signal == names.SIGNAL_RETRY:
        retried = fs.apply_retry(state, message.scope)
        workflow.logger.info("%s: retry %s", run.fleet_id, retried or "nothing")
        run.resolved = False


def _take_spec(run: FleetRun, spec: FleetSpec) -> None:
    state = run.state
    before = state.spec
    paused_before = {e.name: e.paused for e in (before.packages if before else [])}
    if {e.name: e.paused for e in spec.packages} != paused_before and state.planner is not None:
        # A Package paused or resumed by its spec or annotation: which nodes want it changes now.
        run.relist_now = True
    if fs.set_spec(state, spec):
        # Never report the previous wave's Complete while the new one is being planned.
        run.set_phase(RolloutPhase.PENDING)
    if before is None or before.policy != spec.policy:
        run.set_policy()
    run.show_packages()
    for entry in spec.packages:
        # The `noderoll.io/rerun` annotation; its id is taken once (repeated desired states ignore it).
        asked = rerun_from_annotation(entry.name, entry.rerun)
        if asked is not None:
            _take_rerun(run, asked)
