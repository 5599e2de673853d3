"""The bridge's side of the fleet workflows: hand over desired state, query, signal, list. Does I/O (Temporal).

`send` is a signal-with-start of `fleet/<policy>` with signal `desired`: it starts the fleet when it
does not run (`ALLOW_DUPLICATE` lets a fleet that ended start again) and only signals it when it
does (`USE_EXISTING`), so a second bridge, or a restarted one, never starts a second rollout.
The fleet itself ignores a FleetSpec equal to the one it has.

Legacy: `package/<name>` rollouts of releases before fleets are listed and retired here (ADR 0007):
`halt` first (requests not yet started on their node are withdrawn; windows already running
finish in their node workflows), then terminated once the rollout reports `Halted`.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from crd_bridge.decisions import RolloutState
from planning.fleet_status import FleetProgress
from planning.status import RolloutProgress
from protocol import names
from protocol.fleet import FleetInput, FleetSpec, NodeReset
from protocol.node_settings import node_workflow_settings
from workflows.fleet_codec import progress_from_json
from workflows.messages import NodeWorkflowInput


class Fleets:
    """Fleet workflows (and legacy rollouts) of one Temporal namespace and task queue."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    def handle(self, fleet: str) -> WorkflowHandle[Any, Any]:
        """`fleet/<fleet>`, latest run (continue-as-new keeps the id)."""
        return self.client.get_workflow_handle(names.fleet_workflow_id(fleet))

    async def state(self, fleet: str) -> RolloutState:
        """Whether `fleet/<fleet>` is running, closed, or was never started."""
        return await _state(self.handle(fleet))

    async def foreign_queue(self, fleet: str) -> str | None:
        """The task queue `fleet/<fleet>` runs on when it runs on another than this bridge's, else None."""
        try:
            description = await self.handle(fleet).describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        if description.status is not WorkflowExecutionStatus.RUNNING or description.task_queue == self.task_queue:
            return None
        return description.task_queue

    async def send(self, spec: FleetSpec) -> None:
        """Hand `spec` to its fleet: signal-with-start `desired`."""
        shown = ", ".join(f"{e.name} {e.spec.get('version', '?')}" for e in spec.packages) or "no Packages"
        await self.client.start_workflow(
            names.FLEET_WORKFLOW_TYPE,
            FleetInput(policy_name=spec.policy_name),
            id=names.fleet_workflow_id(spec.policy_name),
            task_queue=self.task_queue,
            start_signal=names.SIGNAL_FLEET_SPEC,
            start_signal_args=[spec],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"Fleet rollout of DeploymentPolicy {spec.policy_name}",
            static_details=f"Fleet **{spec.policy_name}** started with {shown}",
        )

    async def reset_node(self, node: str, request: NodeReset) -> None:
        """Signal-with-start `reset` on `node/<node>` (the node workflow applies it between windows)."""
        await self.client.start_workflow(
            names.NODE_WORKFLOW_TYPE, NodeWorkflowInput(node=node, **node_workflow_settings()),  # type: ignore[arg-type]
            id=names.node_workflow_id(node),
            task_queue=self.task_queue, start_signal=names.SIGNAL_NODE_RESET, start_signal_args=[request],
            static_summary=f"node {node}",
        )

    async def signal(self, fleet: str, signal: str, arg: Any = None) -> None:
        """Send `signal` (with `arg` unless None) to the running fleet."""
        handle = self.handle(fleet)
        await (handle.signal(signal) if arg is None else handle.signal(signal, arg))

    async def progress(self, fleet: str) -> FleetProgress:
        """The fleet's answer to the `progress` query."""
        return progress_from_json(await self.handle(fleet).query(names.QUERY_PROGRESS))

    async def desired(self, fleet: str) -> FleetSpec | None:
        """The FleetSpec the running fleet holds (None when it holds none)."""
        return await self.handle(fleet).query(names.QUERY_FLEET_SPEC, result_type=FleetSpec | None)  # type: ignore[arg-type]

    async def running(self) -> list[str]:
        """Fleets with a running workflow on this task queue."""
        return await self._running(names.FLEET_WORKFLOW_TYPE, names.FLEET_WORKFLOW_PREFIX)

    # --- legacy per-Package rollouts -------------------------------------------------------

    async def running_legacy(self) -> list[str]:
        """Packages with a running `package/<name>` rollout on this task queue (before fleets)."""
        return await self._running(names.LEGACY_ROLLOUT_WORKFLOW_TYPE, names.LEGACY_ROLLOUT_WORKFLOW_PREFIX)

    async def retire_legacy(self, package: str, fleet: str) -> str:
        """One step of retiring `package/<name>`: halt it, then terminate it once it reports Halted.

        Returns what was done ("halted", "terminated", "waiting").
        """
        handle = self.client.get_workflow_handle(names.legacy_rollout_workflow_id(package))
        progress = await handle.query(names.QUERY_PROGRESS, result_type=RolloutProgress)
        if progress.phase.value != "Halted":
            await handle.signal(names.SIGNAL_HALT)
            return "halted"
        await handle.terminate(reason=f"superseded by {names.fleet_workflow_id(fleet)} (fleet rollouts, ADR 0007)")
        return "terminated"

    async def _running(self, workflow_type: str, prefix: str) -> list[str]:
        query = (f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running' "
                 f"AND TaskQueue = '{self.task_queue}'")
        found = []
        async for execution in self.client.list_workflows(query):
            if execution.id.startswith(prefix):
                found.append(execution.id.removeprefix(prefix))
        return sorted(set(found))


async def _state(handle: WorkflowHandle[Any, Any]) -> RolloutState:
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return RolloutState.ABSENT
        raise
    return RolloutState.RUNNING if description.status is WorkflowExecutionStatus.RUNNING else RolloutState.CLOSED
