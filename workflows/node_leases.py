"""Disruption leases of one node window, from the budgets of its requests. Deterministic, no I/O.

Leases are taken one budget at a time in sorted (policy, compartment) order, so two windows that
need the same two budgets never deadlock holding one each. Asking is an activity (`acquire_lease`,
a signal-with-start of the budget); the grant arrives as the `lease_granted` signal, recorded by the
node workflow in the shared `grants` set; the release is a plain signal, sent for every lease asked
for (granted or still waiting), so a window that fails half-way leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.io import AcquireLeaseInput
    from api.keys import budget_workflow_id, node_workflow_id
    from workflows.messages import SIGNAL_BUDGET_RELEASE, LeaseRelease, LeaseRequest, NodeRequest


class WindowLeases:
    """The leases one window holds (budget workflow id, lease id)."""

    def __init__(self, node: str, window_key: str, grants: set[str]) -> None:
        self.node = node
        self.window_key = window_key
        self.grants = grants
        self.held: list[tuple[str, str]] = []

    async def acquire(self, requests: Iterable[NodeRequest], timeout: timedelta, retry: RetryPolicy,
                      on_wait: Callable[[str], None]) -> None:
        """Take one lease from each distinct budget of `requests`; returns when all are granted."""
        budgets = sorted({(r.budget.policy, r.budget.compartment): r.budget
                          for r in requests if r.budget is not None}.items())
        for (policy, compartment), ref in budgets:
            budget_id = budget_workflow_id(policy, compartment)
            lease_id = f"{self.node}/{self.window_key}/{policy}/{compartment}"
            # Recorded before asking: a failure from here on still releases (or withdraws) it.
            self.held.append((budget_id, lease_id))
            on_wait("WaitingForLease")
            request = LeaseRequest(node_workflow_id(self.node), lease_id, self.node, ref.limit)
            await workflow.execute_activity(
                "acquire_lease", AcquireLeaseInput(budget_id, request),
                start_to_close_timeout=timeout, retry_policy=retry, summary=f"lease from {budget_id}")
            await workflow.wait_condition(lambda lease=lease_id: lease in self.grants)

    async def release(self) -> None:
        """Return every lease asked for; a budget that no longer runs holds nothing to return."""
        for budget_id, lease_id in self.held:
            self.grants.discard(lease_id)
            try:
                await workflow.get_external_workflow_handle(budget_id).signal(
                    SIGNAL_BUDGET_RELEASE, LeaseRelease(lease_id))
            except Exception as err:  # noqa: BLE001 - any failure means there is nothing to return
                workflow.logger.warning("release of %s to %s failed: %s", lease_id, budget_id, err)
        self.held.clear()
