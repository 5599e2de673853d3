"""The GPU verify of a node window (`spec.verify`, api/verify.py): its pod, and its outcome applied to
the window's ledger. Deterministic, no I/O (the pod is the activity `run_verify_pod`).

The window's sequencer (`workflows/node_window.py`) runs `run_verify` once the stages and the merged
interrupt are done, and `close_verify` before its final state write; the stage pods
(`workflows/node_pods.py`) ask `next_verify_pod` for the pod their last activity creates ahead
(ADR 0022). When a verify runs and what its outcome does are `planning/node/verify.py`'s rules; a window
whose request carries no verify, on a node without a failed verify recorded, does nothing here (the
histories recorded before it replay unchanged).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.stage_pod import VERIFY_MODE
    from api.keys import CORDONED_BY_VALUE
    from planning.node import verify as rules
    from planning.node.window import log_tail, stage_tolerations
    from protocol.activity_refs import RUN_VERIFY_POD
    from protocol.node_activities import NextPod, RunVerifyPodInput, RunVerifyPodResult, StageJob
    from workflows.api_retries import WAIT_RETRY
    from workflows.node_pod_jobs import NextPods
    from workflows.node_window_types import WindowContext, WindowLedger, cause, node_gone

WAIT_MARGIN_SECONDS = 120


def verify_job(ctx: WindowContext) -> StageJob:
    """The window's verify pod, named and labelled after its first Package (activities/verify_pod.py)."""
    assert ctx.verify is not None
    first = ctx.window.packages[0]
    specs = [ctx.specs[n] for n in ctx.window.packages]
    tolerations: list[dict[str, object]] = []
    for spec in specs:
        tolerations.extend(t for t in stage_tolerations(ctx.snapshot.taints, spec) if t not in tolerations)
    secrets = list(dict.fromkeys(s.name for spec in specs for s in spec.image_pull_secrets))
    return StageJob(package=first, version=ctx.specs[first].version, node=ctx.node, mode=VERIFY_MODE,
                    image=ctx.verify.image, attempt=1, window=ctx.key, tolerations=tolerations,
                    timeout_seconds=ctx.verify.timeout_seconds, image_pull_secrets=secrets, node_order=ctx.node_order)


def _wanted(ctx: WindowContext, ledger: WindowLedger, interrupted: bool) -> bool:
    healthy = not ledger.failures and not ledger.skipped
    return rules.wanted(ctx.verify is not None, interrupted, healthy, rules.pending(ctx.recorded, ctx.window.packages))


def next_verify_pod(ctx: WindowContext, ledger: WindowLedger) -> NextPod | None:
    """The verify pod, for the activity of the window's last phase to create ahead once it succeeded
    (the interrupt done); None when the window will run no verify."""
    return NextPod(verify_job(ctx)) if _wanted(ctx, ledger, interrupted=True) else None


async def run_verify(ctx: WindowContext, ledger: WindowLedger, next_pods: NextPods) -> None:
    """Run the window's verify when the rules want one; its outcome goes into `ledger.verify`. A node
    deleted meanwhile raises (the window ends); any other activity failure fails the verify."""
    if not _wanted(ctx, ledger, ledger.interrupted):
        return
    job = verify_job(ctx)
    ctx.set_phase("Running")
    try:
        result: RunVerifyPodResult = await workflow.execute_activity(
            RUN_VERIFY_POD.name, RunVerifyPodInput(job, next_pods.take(NextPod(job))),
            result_type=RunVerifyPodResult,
            start_to_close_timeout=timedelta(seconds=job.timeout_seconds + WAIT_MARGIN_SECONDS),
            heartbeat_timeout=timedelta(seconds=ctx.settings.heartbeat_seconds), retry_policy=WAIT_RETRY,
            summary=f"verify {job.image}"[:200])
    except ActivityError as err:
        if node_gone(err):
            raise
        result = RunVerifyPodResult(job_name="", exit_code=-1, log_tail=cause(err))
    if result.job_name:
        ledger.note_job(job.package, result.job_name, failed=False)
    ledger.verify = rules.outcome_of(job.image, result.job_name, result.exit_code, log_tail(result.log_tail))


def close_verify(ctx: WindowContext, ledger: WindowLedger) -> None:
    """Apply the verify's end to the ledger (planning.node.verify.close): the record in the node's state,
    noderoll's cordon (kept, or lifted although this window's own cordon call did not take it), the
    window's Event, and the failure that fails its Packages."""
    installed = [n for n in ledger.healthy(ctx.window.packages) if n in ledger.state.packages]
    cordoned_before = ctx.snapshot.unschedulable and ctx.snapshot.cordoned_by == CORDONED_BY_VALUE
    end = rules.close(rules.VerifyWindow(ctx.recorded, installed, ctx.verify, ledger.verify, cordoned_before,
                                         ctx.key, workflow.now().isoformat()))
    ledger.state.verify_failed = end.record
    if cordoned_before and (end.take_cordon or end.keep_cordon):
        ledger.cordoned = True
    ledger.keep_cordon = end.keep_cordon
    ledger.verify_failure = end.failure
    if end.event is not None:
        reason, message, warning = end.event
        ledger.notes.append(ctx.event(reason, message, warning))
