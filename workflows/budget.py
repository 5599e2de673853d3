"""The disruption budget of one compartment: `budget/<policy>/<compartment>`. Deterministic, no I/O.

A budget hands out disruption leases first come, first served, so every rollout that uses the
policy together never disrupts more nodes of the compartment at once than the budget allows.

* `acquire` (a `LeaseRequest`, usually by signal-with-start from a node window): queued FIFO; the
  limit is the one of the latest request (rollouts compute it from the policy and the fleet size).
  An `acquire` for a lease id already held is answered again (idempotent for a retried sender).
* Granting: `lease_granted` (a `LeaseGrant`) signalled to the holder's workflow id; the grants of
  one round are chosen FIFO within the limit, then signalled concurrently. A holder that cannot be
  signalled (closed, unknown) gets nothing and its lease is dropped at once.
* `release` (a `LeaseRelease`): returns a held lease or withdraws a waiting request.
* Reclaim: while leases are held, every `RECLAIM_INTERVAL` the holders are described (activity
  `describe_workflow_runs`); leases of holders whose run has closed are returned, whatever the way
  it closed (terminated, failed, timed out), so a crashed window never leaks a lease.
* Continue-as-new carries limit, held leases and the queue; the budget completes after
  `IDLE_TIMEOUT` with nothing held or waiting (the next signal-with-start starts a new run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.io import DescribeWorkflowRunsInput, DescribeWorkflowRunsResult
    from workflows.messages import (
        BUDGET_WORKFLOW_TYPE,
        QUERY_BUDGET_STATUS,
        SIGNAL_BUDGET_ACQUIRE,
        SIGNAL_BUDGET_RELEASE,
        SIGNAL_LEASE_GRANTED,
        BudgetInput,
        BudgetStatus,
        HeldLease,
        LeaseGrant,
        LeaseRelease,
        LeaseRequest,
    )

RECLAIM_INTERVAL = timedelta(seconds=30)
IDLE_TIMEOUT = timedelta(minutes=10)
# Well under Temporal's 50k-event limit; each grant costs ~3 events, each signal 1.
HISTORY_EVENT_LIMIT = 5_000
# Patch id: the grants of one round are signalled concurrently. Before it, each grant waited for the
# previous one's SignalExternalWorkflowExecution to complete (one workflow task round trip each), so
# the 50th window of a batch waited ~5 s for its lease, the 128th ~35 s under load.
CONCURRENT_GRANTS_PATCH = "budget-concurrent-grants"


@workflow.defn(name=BUDGET_WORKFLOW_TYPE)
class BudgetWorkflow:
    """FIFO lease dispenser for one compartment (see the module docstring for the protocol)."""

    def __init__(self) -> None:
        # State lives on the instance from the start: signal-with-start delivers `acquire` in the
        # very first activation, possibly before `run` has restored carried state.
        self._limit = 0
        self._held: dict[str, HeldLease] = {}
        self._waiting: list[LeaseRequest] = []
        self._regrant: list[str] = []
        self._changed = False
        self._next_reclaim: datetime | None = None
        self._history_limit = HISTORY_EVENT_LIMIT

    @workflow.run
    async def run(self, input: BudgetInput) -> None:
        """Serve leases until idle for `IDLE_TIMEOUT`, continuing as new when history grows."""
        self._restore(input)
        self._history_limit = input.history_limit or HISTORY_EVENT_LIMIT
        while True:
            await self._grant_what_fits()
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._carry())
            if self._held:
                # Reclaim on a clock, not on quiet: a busy budget must still check its holders.
                if self._next_reclaim is None or workflow.now() >= self._next_reclaim:
                    if self._next_reclaim is not None:
                        await self._reclaim_closed_holders()
                    self._next_reclaim = workflow.now() + RECLAIM_INTERVAL
                    continue
                await self._wait(lambda: self._changed, self._next_reclaim - workflow.now())
            elif self._waiting:
                # Waiting with nothing held only happens with limit 0: wait for a new limit.
                await self._wait(lambda: self._changed, None)
            else:
                self._next_reclaim = None
                timed_out = await self._wait(lambda: self._changed, IDLE_TIMEOUT)
                if timed_out and not self._held and not self._waiting:
                    return

    @workflow.signal(name=SIGNAL_BUDGET_ACQUIRE)
    def acquire(self, request: LeaseRequest) -> None:
        """Queue a lease request (FIFO); the latest request sets the limit."""
        self._limit = request.limit
        self._changed = True
        if request.lease_id in self._held:
            self._regrant.append(request.lease_id)
            return
        if any(w.lease_id == request.lease_id for w in self._waiting):
            return
        self._waiting.append(request)

    @workflow.signal(name=SIGNAL_BUDGET_RELEASE)
    def release(self, release: LeaseRelease) -> None:
        """Return a held lease or withdraw a waiting request (unknown ids are ignored)."""
        self._changed = True
        self._held.pop(release.lease_id, None)
        self._waiting = [w for w in self._waiting if w.lease_id != release.lease_id]

    @workflow.query(name=QUERY_BUDGET_STATUS)
    def status(self) -> BudgetStatus:
        """Limit, leases in use (lease id -> node) and the number of waiting requests."""
        return BudgetStatus(
            limit=self._limit,
            in_use=len(self._held),
            holders={lease_id: held.node for lease_id, held in self._held.items()},
            waiting=len(self._waiting),
        )

    def _restore(self, input: BudgetInput) -> None:
        if input.limit and not self._limit:
            self._limit = input.limit
        for held in input.held:
            self._held.setdefault(held.lease_id, held)
        known = set(self._held) | {w.lease_id for w in self._waiting}
        # Carried requests were queued earlier than anything signalled into this run.
        self._waiting = [w for w in input.waiting if w.lease_id not in known] + self._waiting

    def _carry(self) -> BudgetInput:
        return BudgetInput(
            limit=self._limit,
            held=list(self._held.values()),
            waiting=list(self._waiting),
            history_limit=self._history_limit,
        )

    async def _wait(self, condition: Callable[[], bool], timeout: timedelta | None) -> bool:
        """Wait for `condition` or the timeout; return True when the timeout elapsed."""
        try:
            await workflow.wait_condition(condition, timeout=timeout)
        except TimeoutError:
            return True
        return False

    async def _grant_what_fits(self) -> None:
        self._changed = False
        if not workflow.patched(CONCURRENT_GRANTS_PATCH):
            await self._grant_one_by_one()
            return
        # Rounds until nothing fits: a dropped grant frees a slot and signals that arrive while a
        # round is being sent may queue or release leases.
        while round_ := self._choose_round():
            # All signal commands of the round go out in one workflow task completion, FIFO order.
            await asyncio.gather(*(self._send_grant(held) for held in round_))

    def _choose_round(self) -> list[HeldLease]:
        """Leases to signal now: re-grants first, then waiting requests FIFO while the limit allows.

        A lease is held from the moment it is chosen, so sends running at once can never hand out
        more than the limit.
        """
        round_ = [self._held[lease_id] for lease_id in self._regrant if lease_id in self._held]
        self._regrant.clear()
        while self._waiting and len(self._held) < self._limit:
            request = self._waiting.pop(0)
            held = HeldLease(request.holder_workflow_id, request.lease_id, request.node)
            self._held[held.lease_id] = held
            round_.append(held)
        return round_

    async def _grant_one_by_one(self) -> None:
        """The behaviour before `CONCURRENT_GRANTS_PATCH`, kept verbatim for recorded histories."""
        for lease_id in self._regrant:
            held = self._held.get(lease_id)
            if held is not None:
                await self._send_grant(held)
        self._regrant.clear()
        while self._waiting and len(self._held) < self._limit:
            request = self._waiting.pop(0)
            held = HeldLease(request.holder_workflow_id, request.lease_id, request.node)
            self._held[held.lease_id] = held
            await self._send_grant(held)

    async def _send_grant(self, held: HeldLease) -> None:
        grant = LeaseGrant(lease_id=held.lease_id, budget_workflow_id=workflow.info().workflow_id)
        try:
            await workflow.get_external_workflow_handle(held.holder_workflow_id).signal(
                SIGNAL_LEASE_GRANTED, grant
            )
        except Exception as err:
            # The holder is gone (closed or never existed): the lease goes back at once.
            workflow.logger.warning("lease %s dropped: holder %s unreachable: %s",
                                    held.lease_id, held.holder_workflow_id, err)
            self._held.pop(held.lease_id, None)

    async def _reclaim_closed_holders(self) -> None:
        holders = sorted({held.holder_workflow_id for held in self._held.values()})
        result = await workflow.execute_activity(
            "describe_workflow_runs",
            DescribeWorkflowRunsInput(workflow_ids=holders),
            result_type=DescribeWorkflowRunsResult,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=30),
        )
        closed = set(result.closed)
        for lease_id, held in list(self._held.items()):
            if held.holder_workflow_id in closed:
                workflow.logger.info("lease %s reclaimed: holder %s closed", lease_id, held.holder_workflow_id)
                del self._held[lease_id]
                self._changed = True

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > self._history_limit
