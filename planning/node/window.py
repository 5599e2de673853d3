"""Pure helpers of one node window: stage pod tolerations, drain settings, time limits, retry backoff,
node state entries and the node's status label. Pure (no I/O); the node workflow calls these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api.enums import NodeStatus, Stage, State
from api.node_state import NodeState, PackageNodeState
from api.package import PackageSpec

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
MAX_BACKOFF_SECONDS = 600.0
LOG_TAIL_LINES = 20


def stage_tolerations(taints: Iterable[Mapping[str, str]], spec: PackageSpec) -> list[dict[str, Any]]:
    """Tolerations of a stage pod: every taint the node has now, the cordon taint, and the package's own.

    The pod is pinned with `nodeName`, so it only needs to survive NoExecute taints and pass the
    kubelet's admission; tolerating exactly what is on the node does that without tolerating everything.
    """
    result: list[dict[str, Any]] = [
        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    ]
    for taint in taints:
        key = taint.get("key", "")
        if key == UNSCHEDULABLE_TAINT:
            continue
        toleration: dict[str, Any] = {"key": key, "effect": taint.get("effect", "")}
        if taint.get("value"):
            toleration.update(operator="Equal", value=taint["value"])
        else:
            toleration["operator"] = "Exists"
        result.append(toleration)
    result.extend(t.model_dump(by_alias=True, exclude_none=True) for t in spec.additional_tolerations)
    return result


@dataclass(frozen=True)
class DrainSettings:
    """How to drain for a window: the most patient timeout, the shortest grace, emptyDir only if all agree."""

    timeout_seconds: int
    grace_period_seconds: int | None
    delete_empty_dir_data: bool


def drain_settings(specs: Iterable[PackageSpec]) -> DrainSettings:
    """Combine the `drain` settings of every package in the window (at least one)."""
    drains = [s.drain for s in specs]
    graces = [d.grace_period_seconds for d in drains if d.grace_period_seconds is not None]
    return DrainSettings(
        timeout_seconds=max(d.timeout_seconds for d in drains),
        grace_period_seconds=min(graces) if graces else None,
        # Deleting local data is destructive: only when every package in the window allows it.
        delete_empty_dir_data=all(d.delete_empty_dir_data for d in drains),
    )


@dataclass(frozen=True)
class TimeLimits:
    """Bounds of a window's waits, in seconds: protected pods, one stage (with its check), a reboot."""

    protected_pods: int
    stage: int
    interrupt: int


def package_limits(spec: PackageSpec, defaults: TimeLimits) -> TimeLimits:
    """A package's `limits`, each unset field replaced by the default (the worker's)."""
    limits = spec.limits
    return TimeLimits(
        protected_pods=limits.protected_pods_timeout_seconds or defaults.protected_pods,
        stage=limits.stage_timeout_seconds or defaults.stage,
        interrupt=limits.interrupt_timeout_seconds or defaults.interrupt,
    )


def window_limits(specs: Iterable[PackageSpec], defaults: TimeLimits) -> TimeLimits:
    """The limits of a window carrying `specs` (at least one): the largest of each, like the drain
    timeout, so a window waits as long as its most patient package allows (a package without a
    value counts with the default). Each stage still uses its own package's `package_limits`."""
    each = [package_limits(spec, defaults) for spec in specs]
    return TimeLimits(
        protected_pods=max(limits.protected_pods for limits in each),
        stage=max(limits.stage for limits in each),
        interrupt=max(limits.interrupt for limits in each),
    )


def protected_selectors(specs: Iterable[PackageSpec]) -> list[dict[str, Any]]:
    """The non-empty `podNonInterruptLabels` selectors of the window's packages, as API dicts."""
    selectors = []
    for spec in specs:
        selector = spec.pod_non_interrupt_labels
        if selector is not None and not selector.is_empty():
            selectors.append(selector.model_dump(by_alias=True, exclude_defaults=True))
    return selectors


def window_key(run_id: str, number: int) -> str:
    """The key of a node run's `number`th window (1-based): it names the window's stage pods, so no two
    windows may share it. The whole run id, because a prefix is not unique: Temporal's run ids are
    UUIDv7, whose first 8 hex digits are the start time in units of 65.5 s, so a window retried within
    a minute of the failed one got the failed pod's name and adopted its failure."""
    return f"{run_id}-{number}"


def retry_backoff(base_seconds: float, failed_attempt: int) -> float:
    """Seconds to wait after attempt `failed_attempt` (1-based) failed: doubling, capped at 10 minutes."""
    return min(base_seconds * 2 ** max(0, failed_attempt - 1), MAX_BACKOFF_SECONDS)


def log_tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log."""
    return "\n".join(text.strip().splitlines()[-lines:])


def node_status(state: NodeState, in_window: bool) -> NodeStatus:
    """The `noderoll.io/status` label for a recorded state (erroring wins, then a running window, then a
    failed GPU verify)."""
    states = {entry.state for entry in state.packages.values()}
    if State.ERRORING in states:
        return NodeStatus.ERRORING
    if in_window or State.IN_PROGRESS in states:
        return NodeStatus.IN_PROGRESS
    if state.verify_failed is not None:
        return NodeStatus.VERIFY_FAILED
    if State.BLOCKED in states:
        return NodeStatus.BLOCKED
    if State.WAITING in states:
        return NodeStatus.WAITING
    return NodeStatus.COMPLETE


@dataclass(frozen=True)
class EntryUpdate:
    """A change of one package's entry in the node state."""

    stage: Stage | None
    state: State
    attempts: int = 0
    last_error: str | None = None


def updated_entry(entry: PackageNodeState, update: EntryUpdate, now: str) -> PackageNodeState:
    """A copy of `entry` with `update` applied and `updatedAt` set (pure)."""
    return entry.model_copy(
        update={
            "stage": update.stage,
            "state": update.state,
            "attempts": update.attempts,
            "last_error": update.last_error,
            "updated_at": now,
        }
    )
