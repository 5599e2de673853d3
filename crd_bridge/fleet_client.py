"""The bridge's side of the fleet workflows: hand over desired state, query, signal, list. Does I/O (Temporal).

`send` is a signal-with-start of `fleet/<policy>` with signal `desired`: it starts the fleet when it
does not run (`ALLOW_DUPLICATE` lets a fleet that ended start again) and only signals it when it
does (`USE_EXISTING`), so a second bridge, or a restarted one, never starts a second rollout.
The fleet itself ignores a FleetSpec equal to the one it has.
With a cluster name (`--cluster`, ADR 0017) the ids are `fleet/<cluster>/<policy>` and
`node/<cluster>/<node>`, and every workflow it starts carries the search attribute `NoderollCluster`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from crd_bridge.decisions import RolloutState
from planning.fleet.codec import progress_from_json
from planning.views.fleet_status import FleetProgress, read_at
from protocol import names
from protocol.fleet import FleetInput, FleetSpec, NodeReset
from protocol.node import Route, cluster_attributes, signal_node_workflow


class Fleets:
    """Fleet workflows of one Temporal namespace, task queue and cluster ("" = none)."""

    def __init__(self, client: Client, task_queue: str, cluster: str = "",
                 relist_min_seconds: int = FleetInput.relist_min_seconds,
                 watchdog_seconds: int = FleetInput.watchdog_seconds) -> None:
        self.client = client
        self.task_queue = task_queue
        self.cluster = cluster
        # Given to the fleets this bridge starts (a running fleet keeps the values it started with).
        self.relist_min_seconds = relist_min_seconds
        self.watchdog_seconds = watchdog_seconds

    def workflow_id(self, fleet: str) -> str:
        """`fleet/<fleet>`, or `fleet/<cluster>/<fleet>` in a named cluster."""
        return names.fleet_workflow_id(fleet, self.cluster)

    def handle(self, fleet: str) -> WorkflowHandle[Any, Any]:
        """The fleet's workflow, latest run (continue-as-new keeps the id)."""
        return self.client.get_workflow_handle(self.workflow_id(fleet))

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
            FleetInput(policy_name=spec.policy_name, cluster=self.cluster, relist_min_seconds=self.relist_min_seconds,
                       watchdog_seconds=self.watchdog_seconds),
            id=self.workflow_id(spec.policy_name),
            task_queue=self.task_queue,
            start_signal=names.SIGNAL_FLEET_SPEC,
            start_signal_args=[spec],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"Fleet rollout of DeploymentPolicy {spec.policy_name}"
                           + (f" in cluster {self.cluster}" if self.cluster else ""),
            static_details=f"Fleet **{spec.policy_name}** started with {shown}",
            search_attributes=cluster_attributes(self.cluster),
        )

    async def reset_node(self, node: str, request: NodeReset) -> None:
        """Signal-with-start `reset` on `node/<node>` (the node workflow applies it between windows)."""
        await signal_node_workflow(self.client, node, names.SIGNAL_NODE_RESET, request,
                                   Route(self.task_queue, self.cluster))

    async def signal(self, fleet: str, signal: str, arg: Any = None) -> None:
        """Send `signal` (with `arg` unless None) to the running fleet."""
        handle = self.handle(fleet)
        await (handle.signal(signal) if arg is None else handle.signal(signal, arg))

    async def progress(self, fleet: str) -> FleetProgress:
        """The fleet's answer to the `progress` query."""
        answer = progress_from_json(await self.handle(fleet).query(names.QUERY_PROGRESS))
        # The ETA as of now, not as of the fleet's last workflow task (planning.views.eta.eta_at).
        return read_at(answer, datetime.now(UTC).isoformat())

    async def desired(self, fleet: str) -> FleetSpec | None:
        """The FleetSpec the running fleet holds (None when it holds none)."""
        return await self.handle(fleet).query(names.QUERY_FLEET_SPEC, result_type=FleetSpec | None)  # type: ignore[arg-type]

    async def running(self) -> list[str]:
        """Fleets with a running workflow on this task queue."""
        query = (f"WorkflowType = '{names.FLEET_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
                 f"AND TaskQueue = '{self.task_queue}'")
        found = []
        prefix = names.fleet_id_prefix(self.cluster)
        async for execution in self.client.list_workflows(query):
            if execution.id.startswith(prefix) and "/" not in execution.id.removeprefix(prefix):
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
