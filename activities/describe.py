"""Liveness of workflow runs, asked of the Temporal server. Does I/O (Temporal frontend).

The fleet uses `describe_workflow_runs` to notice node workflows that closed without answering its
request (terminated or reset from the Temporal UI, timed out). Async activity: it uses the worker's own client (`activity.client()`).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from protocol.activities import DescribeWorkflowRunsInput, DescribeWorkflowRunsResult
from protocol.activity_refs import DESCRIBE_WORKFLOW_RUNS


@activity.defn(name=DESCRIBE_WORKFLOW_RUNS.name)
async def describe_workflow_runs(input: DescribeWorkflowRunsInput) -> DescribeWorkflowRunsResult:
    """Return which of the given workflow ids have no running latest run (closed or unknown)."""
    client = activity.client()
    closed: list[str] = []
    statuses: dict[str, str] = {}
    for workflow_id in input.workflow_ids:
        try:
            description = await client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            # NOT_FOUND means the holder never existed or its history was deleted: it holds nothing.
            if err.status == RPCStatusCode.NOT_FOUND:
                closed.append(workflow_id)
                statuses[workflow_id] = "NOT_FOUND"
                continue
            raise
        if description.status != WorkflowExecutionStatus.RUNNING:
            closed.append(workflow_id)
            statuses[workflow_id] = description.status.name if description.status else "UNKNOWN"
        activity.heartbeat(workflow_id)
    return DescribeWorkflowRunsResult(closed=closed, statuses=statuses)
