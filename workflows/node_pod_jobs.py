"""The jobs of a window's pods, and the pod created ahead by the activity before it (ADR 0022).
Deterministic, no I/O.

`workflows/node_pods.py` asks for every pod with these functions, and the window predicts its next pod
with the same ones (`first_pod`, `interrupt_pod`, `post_first_pod`), so a pod created ahead is the very
pod the window then asks for; `NextPods` hands it over, once, only to that call.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from api.enums import Stage
    from api.interrupts import InterruptRequest, merge_interrupts
    from planning.node.node_plan import StageStep
    from planning.node.pod_steps import pod_modes
    from planning.node.window import package_limits
    from protocol.node_activities import NextPod, PrestartedPod, StageJob
    from workflows.node_window_types import WindowContext, WindowLedger


def phase_jobs(ctx: WindowContext, names: list[str], pending: dict[str, list[StageStep]],
               attempts: dict[str, int]) -> list[StageJob]:
    """The Packages' jobs of one pod running what is left of each of `names` (ADR 0016)."""
    jobs = []
    for name in names:
        steps = pending[name]
        job = ctx.stage_job(name, steps[0].mode, attempts[name])
        job.modes = pod_modes(steps)
        # The pod's deadline covers every stage of the pod (each within its package's stage limit).
        job.timeout_seconds = package_limits(ctx.specs[name], ctx.default_limits()).stage * len(steps)
        jobs.append(job)
    return jobs


def interrupt_owner(ctx: WindowContext, names: list[str], merged: InterruptRequest) -> str:
    """The first package (by name) asking for the winning type: its image runs the interrupt pod."""
    plans = ctx.plan.packages
    return next((n for n in sorted(names) if plans[n].interrupt and plans[n].interrupt.type is merged.type),
                sorted(names)[0])


def interrupt_job(ctx: WindowContext, names: list[str], merged: InterruptRequest, attempt: int) -> StageJob:
    """The interrupt pod of `names`' merged interrupt, attempt `attempt`."""
    job = ctx.stage_job(interrupt_owner(ctx, names, merged), Stage.INTERRUPT.value, attempt)
    job.interrupt = {"type": merged.type.value, "services": list(merged.services)}
    return job


def _first_of_phase(ctx: WindowContext, steps: dict[str, list[StageStep]]) -> NextPod | None:
    """The first pod of a phase: every Package with steps in it, attempt 1."""
    names = [n for n, s in steps.items() if s]
    if not names:
        return None
    jobs = phase_jobs(ctx, names, steps, {n: 1 for n in names})
    return NextPod(jobs[0], jobs[1:])


def first_pod(ctx: WindowContext) -> NextPod | None:
    """The window's first stage pod (every Package's stages before the interrupt, attempt 1: nothing
    failed or was skipped yet); None when none has stages before it."""
    plans = ctx.plan.packages
    return _first_of_phase(ctx, {n: list(plans[n].steps_before_interrupt()) for n in ctx.window.packages})


def interrupt_pod(ctx: WindowContext, names: list[str]) -> NextPod | None:
    """The interrupt pod's first attempt for `names`; None when they merge to no interrupt."""
    merged = merge_interrupts(ctx.plan.packages[n].interrupt for n in names) if names else None
    return NextPod(interrupt_job(ctx, names, merged, 1)) if merged is not None else None


def post_first_pod(ctx: WindowContext, ledger: WindowLedger, names: list[str]) -> NextPod | None:
    """The first post-interrupt pod once the interrupt of `names` succeeded."""
    plans = ctx.plan.packages
    return _first_of_phase(ctx, {n: list(plans[n].steps_after_interrupt()) for n in names if n not in ledger.failures})


@dataclass
class NextPods:
    """The pod the last activity created for the next call, handed over once (ADR 0022)."""

    offered: tuple[NextPod, PrestartedPod] | None = None

    def offer(self, then: NextPod | None, pod: PrestartedPod | None) -> None:
        """The activity just run created `then` as `pod` (None: it did not)."""
        self.offered = (then, pod) if then is not None and pod is not None else None

    def take(self, pod: NextPod) -> PrestartedPod | None:
        """The pod created ahead when it is exactly `pod`; the offer ends either way."""
        offered, self.offered = self.offered, None
        return offered[1] if offered is not None and offered[0] == pod else None
