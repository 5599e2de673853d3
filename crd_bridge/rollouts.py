"""The bridge's side of the rollout workflows: describe, start, signal, query. Does I/O (Temporal).

Starts are idempotent twice over: the bridge starts only when `package/<name>` has no running run
(`describe`), and the start itself uses `WorkflowIDConflictPolicy.USE_EXISTING`, so a second bridge
(or a restarted one racing its own describe) gets the running rollout back instead of a new one.
`ALLOW_DUPLICATE` lets a Package that was deleted and created again get a fresh rollout once the old
one has ended.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from api import keys
from crd_bridge.decisions import RolloutState
from planning.status import RolloutProgress
from workflows.messages import ROLLOUT_WORKFLOW_TYPE, RolloutInput


class Rollouts:
    """Rollout workflows of one Temporal namespace and task queue."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    def _handle(self, package: str) -> WorkflowHandle[Any, Any]:
        # No run id: signals and queries go to the latest run (continue-as-new keeps the id).
        return self.client.get_workflow_handle(keys.rollout_workflow_id(package))

    async def state(self, package: str) -> RolloutState:
        """Whether `package/<name>` is running, closed, or was never started."""
        try:
            description = await self._handle(package).describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                return RolloutState.ABSENT
            raise
        if description.status is WorkflowExecutionStatus.RUNNING:
            return RolloutState.RUNNING
        return RolloutState.CLOSED

    async def start(self, input: RolloutInput) -> None:
        """Start the rollout of `input.package`, or adopt the one already running."""
        await self.client.start_workflow(
            ROLLOUT_WORKFLOW_TYPE,
            input,
            id=keys.rollout_workflow_id(input.package),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"Rollout of Package {input.package}",
            static_details=f"Package **{input.package}** version {input.spec.get('version', '?')}, "
            f"generation {input.generation}, policy {input.policy_name or '(default)'}",
        )

    async def signal(self, package: str, signal: str, arg: Any = None) -> None:
        """Send `signal` (with `arg` unless None) to the running rollout of `package`."""
        handle = self._handle(package)
        if arg is None:
            await handle.signal(signal)
        else:
            await handle.signal(signal, arg)

    async def progress(self, package: str) -> RolloutProgress:
        """The rollout's answer to the `progress` query."""
        return await self._handle(package).query(keys.QUERY_PROGRESS, result_type=RolloutProgress)

    async def running_packages(self) -> list[str]:
        """Packages with a running rollout on this task queue (for rollouts whose Package vanished)."""
        query = (
            f"WorkflowType = '{ROLLOUT_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
            f"AND TaskQueue = '{self.task_queue}'"
        )
        names = []
        async for execution in self.client.list_workflows(query):
            if execution.id.startswith(keys.ROLLOUT_WORKFLOW_PREFIX):
                names.append(execution.id[len(keys.ROLLOUT_WORKFLOW_PREFIX) :])
        return sorted(set(names))
