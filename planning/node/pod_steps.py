"""Stages in one pod (issue #14): which containers a stage pod runs and how far a finished one got. Pure.

A window runs a package's stages before its interrupt in one pod and those after it in another; the
pod runs each stage followed by its check (one container each, in order) and, when it carries the
window's merged interrupt, the interrupt last. When a container fails the pod stops there: the
stages before it are done (stage and check succeeded), the failed one is retried from its stage in
a new pod (with the stages after it), and its attempts count on their own, as when every stage had
its own Job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planning.node.node_plan import StageStep

INTERRUPT_MODE = "interrupt"


def pod_modes(steps: Sequence[StageStep], interrupt: bool = False) -> list[str]:
    """Every container's mode, in order: each stage, then its check; `interrupt` last when carried."""
    modes = [mode for step in steps for mode in (step.mode, step.check) if mode]
    return [*modes, INTERRUPT_MODE] if interrupt else modes


@dataclass(frozen=True)
class PodProgress:
    """How far a pod of `steps` got: the steps done (stage and check succeeded) and the one that
    failed with the mode that failed (the stage or its check), None when every step is done."""

    done: int
    failed: StageStep | None = None
    failed_mode: str = ""


def pod_progress(steps: Sequence[StageStep], completed: Sequence[str], failed_mode: str = "") -> PodProgress:
    """Read a finished pod: `completed` are the modes that exited 0 (in order), `failed_mode` the
    container the pod reported as deciding (it may be "" when the pod ended without one)."""
    succeeded = set(completed)
    done = 0
    for step in steps:
        if step.mode in succeeded and (step.check is None or step.check in succeeded):
            done += 1
            continue
        break
    if done == len(steps):
        return PodProgress(done)
    step = steps[done]
    # The stage ran but its check did not succeed: the check failed (or never got to run).
    mode = failed_mode if failed_mode in (step.mode, step.check) else (
        step.check if step.check and step.mode in succeeded else step.mode)
    return PodProgress(done, step, mode)


@dataclass(frozen=True)
class PhaseProgress:
    """How far a pod of several Packages' steps got (one pod per window phase, ADR 0016): per
    Package that ran (in order), its steps done; the Package that failed (its `PodProgress`), if any.
    Packages after the failed one did not run and are not in `done`."""

    done: dict[str, int]
    failed: str = ""
    progress: PodProgress | None = None


def phase_progress(steps: Mapping[str, Sequence[StageStep]], completed: Mapping[str, Sequence[str]],
                   decided: tuple[str, str] = ("", "")) -> PhaseProgress:
    """Read a finished pod of `steps` (Package -> its steps, in the order they ran): `completed`
    are each Package's modes that exited 0, `decided` the (Package, mode) the pod reported as
    deciding. The first Package whose steps are not all done failed; a pod with no result at all (its
    activity failed) fails in its first Package's first step."""
    done: dict[str, int] = {}
    for name, own in steps.items():
        progress = pod_progress(own, completed.get(name, ()), decided[1] if decided[0] == name else "")
        done[name] = progress.done
        if progress.failed is not None:
            return PhaseProgress(done, name, progress)
    return PhaseProgress(done)
