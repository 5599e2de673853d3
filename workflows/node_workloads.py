"""A node window's part of `spec.workloads` (its fleet's policy): notice, drain rules, skip. Deterministic, no I/O.

The window (`workflows/node_window.py`) calls these around its drain; with no `workloads` in the
request (a policy without it, a request made before it) each is a no-op and the window's commands are
exactly those before it, so recorded histories replay:

* `give_notice`, after the cordon and the wait for protected pods: with `noticeSeconds`, the activity
  `announce_eviction` annotates the pods the drain will evict and sets the node's condition
  (planning/node/eviction_notice.py), then a durable timer waits `noticeSeconds` from the moment they were
  told (none when no pod was told: pods that come later get their own notice from the drain);
* `drain_input` / `drain_seconds`: the drain carries the rules and the notice, and may take the
  longest `WaitForCompletion` timeout and `noticeSeconds` longer (planning/node/drain_rules.py `drain_bound`);
* `skips` / `skip`: with `onDrainTimeout: Skip`, a drain (or protected-pods wait) that ran out of
  time gives the node up: every Package of the window keeps its record as before the window and is
  answered `blocked`; the close uncordons (our cordon only), labels the node `noderoll.io/skipped`,
  writes `noderoll.io/status=blocked` and a Warning Event `DrainSkipped`.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from api.enums import DrainTimeoutAction
    from planning.node.drain_rules import drain_bound, skips_node
    from protocol.activity_refs import ANNOUNCE_EVICTION
    from protocol.node_activities import AnnounceEvictionInput, AnnounceEvictionResult, DrainNodeInput
    from workflows.api_retries import API_TIMEOUT, WAIT_RETRY
    from workflows.node_window_types import WindowContext, WindowLedger

EVENT_DRAIN_SKIPPED = "DrainSkipped"


class WorkloadSteps:
    """The window's workload steps (module docstring), recording into its ledger."""

    def __init__(self, ctx: WindowContext, ledger: WindowLedger) -> None:
        self.ctx = ctx
        self.ledger = ledger
        self.spec = ctx.workloads
        self.rules = list(self.spec.rules) if self.spec is not None else []

    async def give_notice(self) -> None:
        """Annotate the pods to evict and set the node's condition, then wait until the notice ends."""
        if self.spec is None or not self.spec.notice_seconds:
            return
        notice_at = workflow.now() + timedelta(seconds=self.spec.notice_seconds)
        self.ledger.noticed = True  # whatever happens next, the close takes the notice back
        told: AnnounceEvictionResult = await workflow.execute_activity(
            ANNOUNCE_EVICTION.name,
            AnnounceEvictionInput(self.ctx.node, notice_at.isoformat(), [r.dump() for r in self.rules], self.ctx.fleet),
            result_type=AnnounceEvictionResult, start_to_close_timeout=API_TIMEOUT, retry_policy=WAIT_RETRY,
            summary=f"eviction notice until {notice_at.isoformat()}")
        if told.pods:
            # The full notice from the moment every pod was told (so from each annotation's write, never
            # less): the drain starts at, or a little after, the time the annotations announce.
            await workflow.sleep(timedelta(seconds=self.spec.notice_seconds), summary="eviction notice")

    def drain_input(self, base: DrainNodeInput) -> DrainNodeInput:
        """The drain's input with the policy's rules and notice (unchanged without workloads)."""
        if self.spec is None:
            return base
        return dataclasses.replace(base, rules=[r.dump() for r in self.rules], notice_seconds=self.spec.notice_seconds)

    def drain_seconds(self, timeout_seconds: int) -> int:
        """How long the drain may take (the Packages' timeout; longer with WaitForCompletion rules)."""
        return drain_bound(timeout_seconds, self.rules, self.spec.notice_seconds if self.spec is not None else 0)

    def skips(self, err: ActivityError) -> bool:
        """True when the failed drain gives the node up (`onDrainTimeout: Skip` and a timeout)."""
        on_timeout = self.spec.on_drain_timeout if self.spec is not None else DrainTimeoutAction.FAIL
        failure = err.cause
        return isinstance(failure, ApplicationError) and skips_node(on_timeout, failure.type or "")

    def skip(self, why: str) -> None:
        """Give the node up: nothing ran, every Package keeps its record and is answered `blocked`."""
        ctx, ledger = self.ctx, self.ledger
        message = f"drain timed out, node skipped (onDrainTimeout: Skip; noderoll retry --nodes {ctx.node}): {why}"
        ledger.drain_skipped = message
        for name in ledger.healthy(ctx.window.packages):
            ledger.skipped[name] = message
            ledger.leave_as_recorded(name, ctx.recorded)
        ledger.notes.append(ctx.event(EVENT_DRAIN_SKIPPED, message, True))
