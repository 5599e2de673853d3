"""The rollout of every Package of one DeploymentPolicy: `fleet/<policy>`. Deterministic, no I/O.

This workflow decides nothing: the fleet's decisions are the pure state machine of `planning.fleet`
(`FleetMachine`, ADR 0023), which `noderoll plan` and the ETA run too. The workflow feeds the machine
(its signals become messages in the machine's inbox; each command's answer and the workflow's clock go
back to it) and carries its commands out with Temporal: activities by name, signals to node workflows,
durable waits, search attributes and the details line, continue-as-new (`workflows.fleet_commands`).

Signals (contract, each with an optional `Filter` {"packages": [...], "nodes": [...]}): `pause`,
`resume` (without a filter: also clears a halt and promotes a canary awaiting promotion), `halt`
(requests not yet started are withdrawn), `retry` (erroring or blocked nodes are asked again),
`rerun` (a `Rerun`: a complete Package runs again on its nodes, once per id); from the bridge `desired`,
`nodes_changed` and `availability_changed`; from node workflows `window_result`; from `global/<policy>`
`global_turn`. Query `progress`: a `planning.views.fleet_status.FleetProgress`; query `desired_state`.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from api.enums import RolloutPhase
    from planning.fleet.commands import Complete, ContinueAsNew
    from planning.fleet.machine import FleetMachine
    from planning.fleet.messages import (
        Answer,
        AvailabilityChanged,
        Desired,
        NodesChanged,
        Operator,
        RerunAsked,
        TurnGiven,
    )
    from planning.views.fleet_eta import EtaKeeper
    from planning.views.fleet_status import FleetProgress, fleet_progress, has_eta, with_nodes
    from protocol import names
    from protocol.clusters import GlobalTurn
    from protocol.fleet import AvailabilityChanged as AvailabilityPayload
    from protocol.fleet import Filter, FleetInput, FleetSpec, ProgressFilter, Rerun, WindowResult
    from workflows.fleet_commands import FleetCommands

EVERYTHING = Filter()


@workflow.defn(name=names.FLEET_WORKFLOW_TYPE)
class FleetWorkflow:
    """The fleet of one DeploymentPolicy (see the module docstring)."""

    def __init__(self) -> None:
        # Signal-with-start delivers `desired` before `run`: handlers only queue.
        self._machine = FleetMachine()
        self._run = self._machine.run
        # The last `progress` answer, with the key of the workflow task it was computed after; its ETA's keeper.
        self._progress: tuple[tuple[int, datetime, RolloutPhase], FleetProgress] | None = None
        self._eta = EtaKeeper()

    # --- messages ---------------------------------------------------------------------------

    @workflow.signal(name=names.SIGNAL_FLEET_SPEC)
    def desired(self, spec: FleetSpec) -> None:
        """The bridge's desired state: the policy and every Package naming it."""
        self._machine.receive(Desired(spec))

    @workflow.signal(name=names.SIGNAL_PAUSE)
    def pause(self, scope: Filter = EVERYTHING) -> None:
        """No new windows (for the whole fleet, or for the given Packages / nodes)."""
        self._machine.receive(Operator(names.SIGNAL_PAUSE, scope))

    @workflow.signal(name=names.SIGNAL_RESUME)
    def resume(self, scope: Filter = EVERYTHING) -> None:
        """Clear pauses; without a filter also a halt, and promote a canary awaiting promotion."""
        self._machine.receive(Operator(names.SIGNAL_RESUME, scope))

    @workflow.signal(name=names.SIGNAL_HALT)
    def halt(self, scope: Filter = EVERYTHING) -> None:
        """Stop at the next safe point: requests not yet started are withdrawn."""
        self._machine.receive(Operator(names.SIGNAL_HALT, scope))

    @workflow.signal(name=names.SIGNAL_RETRY)
    def retry(self, scope: Filter = EVERYTHING) -> None:
        """Erroring and blocked nodes (all, or the given Packages / nodes) get another window."""
        self._machine.receive(Operator(names.SIGNAL_RETRY, scope))

    @workflow.signal(name=names.SIGNAL_RERUN)
    def rerun(self, request: Rerun) -> None:
        """Run a complete Package again on its nodes (or the given ones), once per id (planning.rollout.fleet_rerun)."""
        self._machine.receive(RerunAsked(request))

    @workflow.signal(name=names.SIGNAL_NODES_CHANGED)
    def nodes_changed(self) -> None:
        """Nodes joined or changed: re-list them (repeats before that re-list do not wake the loop)."""
        self._machine.receive(NodesChanged())

    @workflow.signal(name=names.SIGNAL_AVAILABILITY_CHANGED)
    def availability_changed(self, change: AvailabilityPayload) -> None:
        """Nodes cordoned or uncordoned by someone else, or NotReady / Ready again: read them before a hand-out."""
        self._machine.receive(AvailabilityChanged(tuple(change.nodes)))

    @workflow.signal(name=names.SIGNAL_WINDOW_RESULT)
    def window_result(self, result: WindowResult) -> None:
        """A node workflow's answer to one of our requests."""
        self._machine.receive(Answer(result))

    @workflow.signal(name=names.SIGNAL_GLOBAL_TURN)
    def global_turn(self, turn: GlobalTurn) -> None:
        """`global/<policy>`'s answer: this cluster's turn and the global view (planning.fleet.turns)."""
        self._machine.receive(TurnGiven(turn))

    @workflow.query(name=names.QUERY_PROGRESS)
    def progress(self, nodes: ProgressFilter | None = None) -> FleetProgress:
        """Per Package and for the fleet, and the nodes `nodes` asks for (planning.views.fleet_status).

        The summary is computed once per workflow task: the state changes only in one, and a query sees the
        last task's history length and time (so the key changes with every task). The bridge asks every 3 s;
        during long windows or while the fleet waits no task comes for minutes (ADR 0019). It costs the nodes
        that changed since the last one, not the fleet (issue 45).
        """
        run = self._run
        key = (workflow.info().get_current_history_length(), workflow.now(), run.phase)
        if self._progress is None or self._progress[0] != key:
            # The ETA runs the fleet's machine ahead on a copy when due (planning.views.fleet_eta); readers move it
            # to their own clock (planning.views.eta.eta_at).
            eta = self._eta.get(run) if has_eta(run.phase) else None
            report = fleet_progress(run.state, run.phase, workflow.now().isoformat(), run.fleet_id, eta)
            self._progress = (key, report)
        return with_nodes(self._progress[1], run.state, nodes)

    @workflow.query(name=names.QUERY_FLEET_SPEC)
    def desired_state(self) -> FleetSpec | None:
        """The desired state the fleet holds (what the bridge last handed over)."""
        return self._run.state.spec

    # --- the loop -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: FleetInput) -> None:
        """Carry the machine's commands out until it completes or continues as new (module docstring)."""
        machine = self._machine
        commands = FleetCommands(self._run, input)
        command = machine.start(input, workflow.now())
        while True:
            if isinstance(command, Complete):
                return
            if isinstance(command, ContinueAsNew):
                workflow.continue_as_new(command.input)
            answer = await commands.carry_out(command)
            command = machine.feed(answer, workflow.now())
