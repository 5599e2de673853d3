"""The GPU verify of a node window (`spec.verify`, api/verify.py): when it runs, and what its outcome
does to the node's record, its cordon and the window's answer. Pure (no I/O).

* `parse_verify`: the request's `verify` JSON as a `VerifySpec` (or the problem: the window then
  runs nothing and answers every Package erroring, as for an invalid Package spec);
* `pending`: the node's last verify failed in a window of one of these Packages;
* `reruns`: a window whose request asks for a verify runs the Packages its node's failed verify
  names again (their install sequence: `retry` runs the window again, then the verify);
* `wanted`: the window runs a verify when its request asks for one, no Package of it failed or was
  skipped, and its merged interrupt succeeded or a failed verify of it is pending (a window without
  an interrupt changed nothing the GPUs run with);
* `outcome_of`: the verify pod's result as a `VerifyOutcome` (exit 0 passes; a non-zero exit, the
  deadline or a pod that could not start fails, the message says which);
* `close`: after the window, the record left (`VerifyFailed`: cleared by a pass, set or extended by a
  failure, kept as it is when no verify ran), whether noderoll's cordon stays (a failure with
  `KeepCordoned`, or a record that stands), whether the window lifts a cordon a failed verify left
  (a pass, or a failure with `Uncordon`), and the window's Event.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from api.node_state import NodeState, VerifyFailed
from api.verify import VerifyFailure, VerifySpec

# The stage a failed verify is reported at (`PackageOutcome.stage`: the fleet's failure accounting).
VERIFY_STAGE = "verify"
EVENT_VERIFIED = "Verified"
EVENT_VERIFY_FAILED = "VerifyFailed"
EVENT_VERIFY_PENDING = "VerifyPending"


def parse_verify(raw: Mapping[str, Any] | None) -> tuple[VerifySpec | None, str]:
    """The request's `spec.verify` JSON as a model, or (None, the problem); (None, "") when absent."""
    if raw is None:
        return None, ""
    try:
        return VerifySpec.model_validate(raw), ""
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, f"spec.verify{'.' + where if where else ''}: {first['msg']}"


def pending(recorded: NodeState, packages: Collection[str]) -> bool:
    """The node's last verify failed in a window of one of `packages`."""
    record = recorded.verify_failed
    return record is not None and any(p in record.packages for p in packages)


def reruns(recorded: NodeState, packages: Collection[str], asked: bool) -> dict[str, str]:
    """Package -> "" (the whole install sequence) for each of `packages` the node's failed verify
    names, when the request asks for a verify (without one, running them again could not clear it)."""
    record = recorded.verify_failed
    if record is None or not asked:
        return {}
    return {p: "" for p in sorted(packages) if p in record.packages}


def wanted(asked: bool, interrupted: bool, healthy: bool, is_pending: bool) -> bool:
    """Whether the window runs a verify (module rules)."""
    return asked and healthy and (interrupted or is_pending)


@dataclass(frozen=True)
class VerifyOutcome:
    """What the verify pod said: passed or not, one line why, and its log tail."""

    passed: bool
    message: str
    log_tail: str = ""
    pod: str = ""


def outcome_of(image: str, pod: str, exit_code: int, log_tail: str) -> VerifyOutcome:
    """The verify pod's result (exit code -1: no container result: the deadline, a pod that cannot
    start, a pod deleted; its log tail then says which)."""
    if exit_code == 0:
        return VerifyOutcome(True, f"GPU verify {image} passed", log_tail, pod)
    if exit_code > 0:
        return VerifyOutcome(False, f"GPU verify {image} failed (exit code {exit_code})", log_tail, pod)
    last = next((line for line in reversed(log_tail.strip().splitlines()) if line.strip()), "no result")
    return VerifyOutcome(False, f"GPU verify {image} failed: {last.strip()}"[:500], log_tail, pod)


def failed_message(outcome: VerifyOutcome) -> str:
    """The message of each Package of a window whose verify failed (they completed on the host)."""
    return f"complete on the host; {outcome.message}"


@dataclass(frozen=True)
class VerifyClose:
    """What the window's end does for its verify (module rules)."""

    record: VerifyFailed | None
    # noderoll's cordon stays on the node.
    keep_cordon: bool = False
    # The window lifts noderoll's cordon although its own cordon call did not take it (a cordon a
    # failed verify left).
    take_cordon: bool = False
    # (reason, message, warning) of the window's Event; None: none.
    event: tuple[str, str, bool] | None = None
    # The failure that fails the window's Packages; None: the verify passed or did not run.
    failure: VerifyOutcome | None = None


@dataclass(frozen=True)
class VerifyWindow:
    """The window as its verify's end sees it."""

    recorded: NodeState
    # The window's Packages that ended installed (complete, not uninstalled).
    installed: Collection[str]
    spec: VerifySpec | None
    outcome: VerifyOutcome | None
    # The node carried noderoll's cordon when the window read it.
    cordoned_before: bool
    key: str
    now: str


def close(window: VerifyWindow) -> VerifyClose:
    """The record, the cordon and the Event after the window (module rules)."""
    record, outcome, spec = window.recorded.verify_failed, window.outcome, window.spec
    if outcome is None:
        if record is None:
            return VerifyClose(None)
        shown = ", ".join(record.packages) or "the node"
        event = None
        if pending(window.recorded, window.installed) and spec is None:
            event = (EVENT_VERIFY_PENDING,
                     f"the last GPU verify ({shown}) failed and this window asks for none: the record and "
                     "noderoll's cordon stay until a verify passes (or kubectl uncordon, noderoll node reset)", True)
        return VerifyClose(record, keep_cordon=window.cordoned_before, event=event)
    if outcome.passed:
        cleared = f"; the failed verify of {', '.join(record.packages)} is cleared" if record else ""
        return VerifyClose(None, take_cordon=window.cordoned_before,
                           event=(EVENT_VERIFIED, f"{outcome.message}{cleared}", False))
    assert spec is not None  # a verify ran
    packages = sorted({*(record.packages if record else ()), *window.installed})
    failed = VerifyFailed(packages=packages, message=outcome.message, image=spec.image, window=window.key,
                          updated_at=window.now)
    keep = spec.on_failure is VerifyFailure.KEEP_CORDONED
    what = "stays cordoned" if keep else "is uncordoned (onFailure: Uncordon)"
    return VerifyClose(failed, keep_cordon=keep, take_cordon=not keep and window.cordoned_before,
                       event=(EVENT_VERIFY_FAILED, f"{outcome.message}: the node {what}; Packages "
                              f"{', '.join(packages)} completed on the host", True),
                       failure=outcome)
