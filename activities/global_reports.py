"""A cluster's fleet reports to `global/<policy>`: signal-with-start `cluster_report`. Does I/O (Temporal).

A workflow cannot signal-with-start another workflow, so the fleet of a named cluster whose policy
has `spec.clusters` reports through this activity (ADR 0017): it starts `global/<policy>` on task
queue `noderoll-global` when no run is open (the first cluster to report starts it) and only signals
the open run otherwise. Idempotent in effect: the global workflow takes a report as the cluster's
latest word, and the same report twice changes nothing.
"""

from __future__ import annotations

from temporalio import activity

from protocol import names
from protocol.activities import ReportToGlobalInput
from protocol.clusters import GlobalInput


@activity.defn(name="report_to_global")
async def report_to_global(input: ReportToGlobalInput) -> None:
    """Signal-with-start `global/<policy>` with the cluster's report."""
    await activity.client().start_workflow(
        names.GLOBAL_WORKFLOW_TYPE,
        GlobalInput(policy=input.policy),
        id=names.global_workflow_id(input.policy),
        task_queue=names.GLOBAL_TASK_QUEUE,
        start_signal=names.SIGNAL_CLUSTER_REPORT,
        start_signal_args=[input.report],
        static_summary=f"Promotion of DeploymentPolicy {input.policy} across clusters",
    )
