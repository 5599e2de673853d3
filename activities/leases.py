"""Disruption leases, asked of a compartment's budget workflow. Does I/O (Temporal frontend).

A workflow cannot signal-with-start another workflow, so the node window asks through this
activity: signal-with-start `budget/<policy>/<compartment>` with `acquire`. The grant comes back
asynchronously as the `lease_granted` signal on the node workflow (workflows/messages.py); the
release is a plain signal the node workflow sends itself. Idempotent: the budget answers a repeated
`acquire` for a lease it already granted with the same grant.
"""

from __future__ import annotations

from temporalio import activity

from activities.io import AcquireLeaseInput
from workflows.messages import BUDGET_WORKFLOW_TYPE, SIGNAL_BUDGET_ACQUIRE, BudgetInput


@activity.defn(name="acquire_lease")
async def acquire_lease(input: AcquireLeaseInput) -> None:
    """Queue a lease request on the budget workflow, starting the budget if it does not run."""
    await activity.client().start_workflow(
        BUDGET_WORKFLOW_TYPE,
        BudgetInput(),
        id=input.budget_workflow_id,
        task_queue=activity.info().task_queue,
        start_signal=SIGNAL_BUDGET_ACQUIRE,
        start_signal_args=[input.request],
    )
