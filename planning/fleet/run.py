"""What one run of the fleet machine holds, in one place: `FleetRun`. Pure.

`FleetRun` is the run's state: its input, the fleet's memory (`planning.rollout.fleet_state.FleetState`, carried
through continue-as-new), the policy it runs under, its phase, the inbox the workflow's signal handlers
fill (`planning.fleet.messages`), the loop's flags and the clock (`now`, set by the driver before every
event). Every part of the machine (`planning/fleet/*.py`) receives the `FleetRun` it acts on; none holds
state of its own besides it.

Steps that may need the driver are generators (`Steps`): they yield commands (`planning.fleet.commands`)
and receive each command's answer.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError

from api.enums import CanaryPhase, RolloutPhase
from api.policy import DeploymentPolicySpec
from planning.clusters import cluster_turns as turns
from planning.fleet.codec import state_to_json
from planning.fleet.commands import Command, HistoryFull, Log, Patched, Show
from planning.fleet.messages import Message, NodesChanged
from planning.rollout import disruption, maintenance, rolling
from planning.rollout import fleet_state as fs
from planning.rollout import gates as gate_rules
from planning.rollout.compartments import DEFAULT_POLICY
from planning.views.fleet_status import details_line
from protocol import names
from protocol.fleet import FleetInput

T = TypeVar("T")
# A step of the machine: yields commands, receives their answers, returns a T.
Steps = Generator[Command, Any, T]

# Runs recorded before a rolling fleet re-listed on `nodes_changed` while rolling replay without it.
ROLLING_RELIST_PATCH = "rolling-relists-while-rolling"
# Runs recorded before other maintenance counted (issue 44: nodes cordoned by someone else or held by
# another maintenance take slots of the count budget, a held node is not started) replay without it.
RESPECT_PATCH = "respect-other-maintenance"
HISTORY_EVENT_LIMIT = 10_000
# The earliest time (a listing or a watchdog round that has not happened yet).
NEVER = datetime.min.replace(tzinfo=UTC)
ONE_SECOND = timedelta(seconds=1)
# `nodes_changed` comes at every cordon of every node: re-list at most this often.
# The default of `FleetInput.relist_min_seconds`; a run's own is `FleetRun.relist_gap`.
RELIST_MIN_INTERVAL = timedelta(seconds=30)
# A listing reads and classifies every node of the fleet: at scale a fleet lists at most once per this many
# seconds per node (10,000 nodes: every 300 s, as its periodic re-list), so its listings cost the same per
# second, and per window, at any size (issue 45). Runs recorded before the rule replay without it.
LISTING_SECONDS_PER_NODE = 0.03
LISTINGS_SCALE_PATCH = "listings-scale-with-the-fleet"


@dataclass
class FleetRun:
    """Everything one run of a fleet holds (module docstring)."""

    # Set when the run starts (signal-with-start delivers `desired` before that: handlers only queue).
    input: FleetInput = field(default_factory=lambda: FleetInput(policy_name=""))
    state: fs.FleetState = field(default_factory=fs.FleetState)
    phase: RolloutPhase = RolloutPhase.PENDING
    policy: DeploymentPolicySpec = DEFAULT_POLICY
    inbox: list[Message] = field(default_factory=list)
    # The driver's clock: the time of the event being handled.
    now: datetime = NEVER
    # What the Temporal UI's details line shows.
    details: str = ""
    # `nodes_changed` arrived (a re-list is pending, rate-limited); one was queued and not listed yet;
    # a re-list is wanted at once (a user action), not rate-limited.
    relist: bool = False
    relist_requested: bool = False
    relist_now: bool = False
    listed_at: datetime = NEVER
    # Targets were listed since the last batch was handed over.
    resolved: bool = False
    # `NoderollPackage` as last shown.
    packages_shown: list[str] = field(default_factory=list)
    # Nodes whose request must be withdrawn (halt), and those whose withdrawal was sent.
    to_withdraw: set[str] = field(default_factory=set)
    withdrawing: set[str] = field(default_factory=set)
    next_watchdog: datetime = NEVER
    # Drain-ahead (`planning.fleet.ahead`): when its marks next change, the batch nodes whose mark is
    # old enough, the predicted next batch (and what it was predicted for), the last mark write.
    ahead_wake: datetime | None = None
    ahead_ready: list[str] = field(default_factory=list)
    ahead_preview: list[str] = field(default_factory=list)
    ahead_preview_for: str = ""
    ahead_written: datetime | None = None
    # The budget at hand-out (`planning.fleet.handout`): nodes changed by someone else since the last read.
    availability_changed: set[str] = field(default_factory=set)
    # Answers of `Patched` so far (a patch is asked once per run, where the workflow asked it).
    patches: dict[str, bool] = field(default_factory=dict)
    # The Temporal UI's details line is computed (False: a run ahead, the ETA's, which shows nothing).
    show_details: bool = True

    @property
    def fleet_id(self) -> str:
        return names.fleet_workflow_id(self.input.policy_name, self.input.cluster)

    def stamp(self) -> str:
        """The clock as RFC 3339 text (what the fleet's state records)."""
        return self.now.isoformat()

    def change(self) -> str:
        """The change set of the desired state (`planning.clusters.cluster_turns.change_id`; "" without one)."""
        spec = self.state.spec
        return turns.change_id({e.name: fs.package_revision(e) for e in spec.packages}) if spec else ""

    def receive(self, message: Message) -> None:
        """Queue a message (what the workflow's signal handlers do); repeated `nodes_changed` before the
        re-list they ask for do not wake the loop again."""
        if isinstance(message, NodesChanged):
            if self.relist_requested:
                return
            self.relist_requested = True
        self.inbox.append(message)

    # --- patches and history --------------------------------------------------------------------

    def patched(self, patch_id: str) -> Steps[bool]:
        """Whether the run takes patch `patch_id`'s path (asked of the driver once, where the workflow asks)."""
        if patch_id not in self.patches:
            self.patches[patch_id] = bool((yield Patched(patch_id)))
        return self.patches[patch_id]

    def others(self) -> Steps[disruption.Others | None]:
        """What other people and controllers hold, for the planner (None in runs recorded before the rule)."""
        if not (yield from self.patched(RESPECT_PATCH)):
            return None
        return fs.others(self.state, self.policy)

    def respect_json(self) -> dict[str, Any]:
        """The policy's `spec.respect` as listings and reads take it ({}: the defaults)."""
        return self.policy.respect.dump() if self.policy.respect else {}

    def should_continue_as_new(self) -> Steps[bool]:
        full = yield HistoryFull(self.input.history_limit or HISTORY_EVENT_LIMIT)
        return bool(full)

    # --- phase and details ----------------------------------------------------------------------

    def set_phase(self, phase: RolloutPhase) -> Steps[None]:
        """The phase (`NoderollPhase`) and the current-details line of the Temporal UI."""
        details = details_line(self.state, phase, self.fleet_id) if self.show_details else ""
        shown_details = details if details != self.details else None
        self.details = details
        shown_phase = phase if phase is not self.phase else None
        self.phase = phase
        if shown_details is not None or shown_phase is not None:
            yield Show(details=shown_details, phase=shown_phase)

    def set_working_phase(self) -> Steps[None]:
        """The phase while the fleet works: uninstalling, paused, canary or progressing."""
        state = self.state
        planner = state.planner
        if any(e.uninstall for e in (state.spec.packages if state.spec else [])) and fs.remaining(state):
            yield from self.set_phase(RolloutPhase.UNINSTALLING)
        elif state.paused:
            yield from self.set_phase(RolloutPhase.PAUSED)
        elif planner is not None and planner.canary_phase is CanaryPhase.RUNNING:
            yield from self.set_phase(RolloutPhase.CANARY)
        else:
            yield from self.set_phase(RolloutPhase.PROGRESSING)

    def show_packages(self) -> Steps[None]:
        """`NoderollPackage`: every Package the fleet carries (a keyword list)."""
        spec = self.state.spec
        names_now = sorted(e.name for e in spec.packages) if spec else []
        if names_now != self.packages_shown:
            self.packages_shown = names_now
            yield Show(packages=names_now)

    def set_policy(self) -> Steps[None]:
        """Validate the desired state's policy; a policy that still fails keeps the last good one."""
        spec = self.state.spec
        if spec is None:
            return
        try:
            self.policy = DeploymentPolicySpec.model_validate(spec.policy) if spec.policy else DEFAULT_POLICY
        except ValidationError as err:
            # The bridge validates first.
            yield Log(f"invalid policy for {self.fleet_id}: {err}", warning=True)

    def log(self, text: str, warning: bool = False) -> Steps[None]:
        """A line in the worker's log, prefixed with the fleet's id."""
        yield Log(f"{self.fleet_id}: {text}", warning)

    # --- timing -------------------------------------------------------------------------------

    def relist_wanted(self) -> Steps[bool]:
        """A `nodes_changed` re-list is pending and useful now.

        While a batch is out, node changes (mostly our own windows' cordons and reboots) wait for
        the re-listing before the next batch instead of costing a listing each. A rolling fleet has no
        next batch (its windows are always out), so it re-lists as it rolls, at most every
        `relist_gap`: a node that joins, or whose blocking taint lifts (a new node's
        `node.kubernetes.io/not-ready`), is not left out until the known nodes are done.
        """
        planner = self.state.planner
        if planner is not None and planner.current and not self.state.halted:
            if not (rolling.rolls_now(planner) and (yield from self.patched(ROLLING_RELIST_PATCH))):
                return False
        return self.relist

    def relist_due(self, next_relist: datetime) -> Steps[bool]:
        """A re-list now: a `nodes_changed` one past its rate limit, the periodic one, or one asked at once."""
        limit = max(self.relist_gap, (yield from self.listing_interval()))
        return (((yield from self.relist_wanted()) and self.now >= self.listed_at + limit)
                or self.now >= next_relist or self.relist_now)

    @property
    def relist_gap(self) -> timedelta:
        """The least time between two `nodes_changed` re-lists (`FleetInput.relist_min_seconds`, at least 1 s)."""
        return max(timedelta(seconds=self.input.relist_min_seconds), ONE_SECOND)

    def listing_interval(self) -> Steps[timedelta]:
        """The least time between two listings of this fleet (LISTING_SECONDS_PER_NODE; none before the rule)."""
        if not self.state.targets or not (yield from self.patched(LISTINGS_SCALE_PATCH)):
            return timedelta()
        return timedelta(seconds=len(self.state.targets) * LISTING_SECONDS_PER_NODE)

    def listing_due(self) -> Steps[bool]:
        """A listing before the next batch: asked at once, or the last one is `listing_interval` old."""
        return self.relist_now or self.now >= self.listed_at + (yield from self.listing_interval())

    def next_relist(self) -> Steps[datetime]:
        """When the periodic re-list is due from now: `relist_seconds`, or the listing interval when longer."""
        return self.now + max(timedelta(seconds=self.input.relist_seconds), (yield from self.listing_interval()))

    def windows_open(self) -> bool:
        """The policy's maintenance windows are open now (or it has none)."""
        return maintenance.is_open(self.policy.maintenance_windows, self.now)

    def hold_wakeups(self) -> list[timedelta]:
        """While windows are out: the close of the maintenance window and the next continuous gate sample."""
        state, now = self.state, self.now
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

    def carry_over(self) -> FleetInput:
        """The next run's input: this one's, with the fleet's state."""
        return FleetInput(
            policy_name=self.input.policy_name,
            node_task_queue=self.input.node_task_queue,
            relist_seconds=self.input.relist_seconds,
            watchdog_seconds=self.input.watchdog_seconds,
            relist_min_seconds=self.input.relist_min_seconds,
            history_limit=self.input.history_limit,
            carry=state_to_json(self.state),
            cluster=self.input.cluster,
        )
