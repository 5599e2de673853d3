"""A cluster's fleet reports to `global/<policy>`: signal-with-start `cluster_report`. Does I/O (Temporal).

A workflow cannot signal-with-start another workflow, so the fleet of a named cluster whose policy
has `spec.clusters` reports through this activity (ADR 0017): it starts `global/<policy>` on task
queue `noderoll-global` when no run is open (the first cluster to report starts it) and only signals
the open run otherwise. Two clusters reporting at once can race the start: the loser is told the
workflow "already started" (the time-skipping test server says so to a signal-with-start) and then
signals the run that won. Idempotent in effect: the global workflow takes a report as the cluster's
latest word, and the same report twice changes nothing.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import WorkflowAlreadyStartedError

from protocol import names
from protocol.activities import ReportToGlobalInput
from protocol.activity_refs import REPORT_TO_GLOBAL
from protocol.clusters import GlobalInput


@activity.defn(name=REPORT_TO_GLOBAL.name)
async def report_to_global(input: ReportToGlobalInput) -> None:
    """Signal-with-start `global/<policy>` with the cluster's report."""
    client = activity.client()
    workflow_id = names.global_workflow_id(input.policy)
    try:
        await client.start_workflow(
            names.GLOBAL_WORKFLOW_TYPE,
            GlobalInput(policy=input.policy),
            id=workflow_id,
            task_queue=names.GLOBAL_TASK_QUEUE,
            start_signal=names.SIGNAL_CLUSTER_REPORT,
            start_signal_args=[input.report],
            static_summary=f"Promotion of DeploymentPolicy {input.policy} across clusters",
        )
    except WorkflowAlreadyStartedError:
        # Another cluster's report started it between our check and our start: signal that run.
        await client.get_workflow_handle(workflow_id).signal(names.SIGNAL_CLUSTER_REPORT, input.report)
