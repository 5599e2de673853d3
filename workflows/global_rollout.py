"""The promotion of one DeploymentPolicy's changes across clusters: `global/<policy>`. Deterministic, no I/O.

Started by the first cluster that reports (activity `report_to_global`, signal-with-start
`cluster_report` on task queue `noderoll-global`, which the worker of every named cluster polls: it
calls no activity, so whichever cluster's worker is up runs it; ADR 0017). Every decision is
`planning/clusters/global_rollout.py`: which copy of `spec.clusters` runs, which stage each change set is
granted, soaks, halts. The workflow only sequences:

* `cluster_report` (a `ClusterReport`) from a cluster's fleet: recorded; a failure under
  `onFailure: haltAll` halts the promotion and every fleet it knows (their `halt` signal);
* `pause`, `resume`, `halt` (contract signals; a fleet's optional filter is accepted and ignored):
  no new turns while paused or halted; relayed to every fleet as the same signal;
* after every change, the stages that completed and soaked are granted, and every fleet whose answer
  changed gets a `GlobalTurn` (signal `global_turn`): its turn and the view it shows in its status;
* a timer wakes it when a soak ends. Query `progress`: a `GlobalView` (its `clusters` section:
  every cluster's stage and state);
* the fleet of every staged cluster it never heard from (`fleet/<cluster>/<policy>`, once per run) is
  asked to report again (`GlobalTurn.report_again`), so a global workflow started afresh after its
  state was lost (terminated by hand) learns what the clusters already did.

It stays open while a fleet may still report, continues as new when its history grows, and
completes once the fleet of every cluster of its stages has reported that it ended
(`rules.finished`: the policy's Packages are gone everywhere); a later report starts a new run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from planning.clusters import global_rollout as rules
    from planning.clusters.global_codec import global_state_from_json, global_state_to_json
    from protocol import names
    from protocol.clusters import ClusterReport, GlobalInput, GlobalTurn, GlobalView
    from protocol.fleet import Filter

EVERYTHING = Filter()
HISTORY_EVENT_LIMIT = 5_000
ONE_SECOND = timedelta(seconds=1)
ENDED_RELEASE_PATCH = "global-ended-release"


@dataclass(frozen=True)
class Relay:
    """Inbox: an operator signal on global/<policy> (relayed to every fleet)."""

    signal: str


@workflow.defn(name=names.GLOBAL_WORKFLOW_TYPE)
class GlobalRolloutWorkflow:
    """The promotion of one policy's changes across clusters (see the module docstring)."""

    def __init__(self) -> None:
        # Signal-with-start delivers `cluster_report` before `run`: handlers only queue.
        self._state = rules.GlobalState()
        self._inbox: list[ClusterReport | Relay] = []
        # Cluster -> the last answer sent (its view without the time), so an unchanged one is not resent.
        self._answered: dict[str, GlobalTurn] = {}
        self._history_limit = HISTORY_EVENT_LIMIT
        # Clusters whose fleet this run asked to report again.
        self._asked: set[str] = set()

    @workflow.signal(name=names.SIGNAL_CLUSTER_REPORT)
    def cluster_report(self, report: ClusterReport) -> None:
        """A cluster's fleet asks for its turn or reports its outcome."""
        self._inbox.append(report)

    @workflow.signal(name=names.SIGNAL_PAUSE)
    def pause(self, scope: Filter = EVERYTHING) -> None:
        """No new turns; every fleet is paused."""
        self._inbox.append(Relay(names.SIGNAL_PAUSE))

    @workflow.signal(name=names.SIGNAL_RESUME)
    def resume(self, scope: Filter = EVERYTHING) -> None:
        """Clear a pause and a halt; every fleet is resumed."""
        self._inbox.append(Relay(names.SIGNAL_RESUME))

    @workflow.signal(name=names.SIGNAL_HALT)
    def halt(self, scope: Filter = EVERYTHING) -> None:
        """No new turns; every fleet is halted."""
        self._inbox.append(Relay(names.SIGNAL_HALT))

    @workflow.query(name=names.QUERY_PROGRESS)
    def progress(self) -> GlobalView:
        """The latest change's stage, and every cluster's stage and state (`clusters`)."""
        return rules.global_view(self._state, workflow.now())

    @workflow.run
    async def run(self, input: GlobalInput) -> None:
        """Coordinate the clusters' fleets until continued as new (module docstring)."""
        if input.carry:
            self._state = global_state_from_json(input.carry)
        self._state.policy = input.policy
        # An ended cluster's stage completes without it (runs recorded before the rule replay without it).
        self._state.ended_release = workflow.patched(ENDED_RELEASE_PATCH)
        self._history_limit = input.history_limit or HISTORY_EVENT_LIMIT
        while True:
            relays = self._apply_inbox()
            wake = rules.advance(self._state, workflow.now())
            for signal in relays:
                await self._relay(signal)
            await self._answer_all()
            await self._ask_unheard()
            if rules.finished(self._state):
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._inbox:
                    workflow.logger.info("global/%s: every cluster's fleet ended", self._state.policy)
                    return
                continue
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._inbox:
                    workflow.continue_as_new(replace(input, carry=global_state_to_json(self._state)))
                continue
            timeout = None if wake is None else max(wake - workflow.now(), ONE_SECOND)
            try:
                await workflow.wait_condition(lambda: bool(self._inbox), timeout=timeout)
            except TimeoutError:
                pass  # a soak ended: `advance` grants the next stage

    def _apply_inbox(self) -> list[str]:
        """Apply the queued messages in order; the signals to relay to every fleet."""
        inbox, self._inbox = self._inbox, []
        state, relays = self._state, []
        for message in inbox:
            if isinstance(message, ClusterReport):
                if rules.record_report(state, message):
                    workflow.logger.warning("global/%s halted: %s", state.policy, state.halted)
                    relays.append(names.SIGNAL_HALT)
            elif message.signal == names.SIGNAL_PAUSE:
                state.paused = True
                relays.append(message.signal)
            elif message.signal == names.SIGNAL_RESUME:
                state.paused, state.halted = False, ""
                relays.append(message.signal)
            elif message.signal == names.SIGNAL_HALT:
                state.halted = state.halted or "halted by signal"
                relays.append(message.signal)
        return relays

    async def _relay(self, signal: str) -> None:
        for cluster, fleet_id in rules.live_fleets(self._state):
            await self._signal(fleet_id, signal, EVERYTHING, cluster)

    async def _answer_all(self) -> None:
        now = workflow.now()
        for cluster, fleet_id in rules.live_fleets(self._state):
            turn = rules.turn_for(self._state, cluster, now)
            if self._answered.get(cluster) == replace(turn, view=replace(turn.view, updated_at="")):
                continue
            self._answered[cluster] = replace(turn, view=replace(turn.view, updated_at=""))
            await self._signal(fleet_id, names.SIGNAL_GLOBAL_TURN, turn, cluster)

    async def _ask_unheard(self) -> None:
        state, now = self._state, workflow.now()
        for cluster in rules.unheard(state):
            if cluster in self._asked:
                continue
            self._asked.add(cluster)
            turn = GlobalTurn(change="", granted=False, view=rules.global_view(state, now), report_again=True,
                              message=f"global/{state.policy} asks for this cluster's report")
            await self._signal(names.fleet_workflow_id(state.policy, cluster), names.SIGNAL_GLOBAL_TURN, turn,
                               cluster)

    async def _signal(self, fleet_id: str, signal: str, payload: object, cluster: str) -> None:
        try:
            await workflow.get_external_workflow_handle(fleet_id).signal(signal, payload)
        except Exception as err:  # noqa: BLE001 - a fleet that ended hears again when it reports
            workflow.logger.info("global/%s: %s to %s (cluster %s) not delivered: %s",
                                 self._state.policy, signal, fleet_id, cluster, err)

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > self._history_limit
