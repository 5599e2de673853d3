"""What a drain that waits reports, and which Packages it holds up. Pure (no I/O).

The drain activities (activities/drain.py) describe their wait in the node condition
`noderoll.io/Draining` (reason `api.enums.DrainReason`, message naming the blocking pods and
PodDisruptionBudgets) and one aggregated node Event; they use `DrainNotice` to decide when a wait
counts as blocked and when to write. The bridge (Package status) and the CLI (`noderoll nodes`,
`noderoll status PKG`) read the condition back with `read_drain_condition` and attribute it to the
Packages of the node's window with `drain_block`: those whose entry in `noderoll.io/state` is
`in_progress` since before the drain began.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from api.enums import DrainReason, State
from api.keys import CONDITION_DRAINING, NODE_STATE_ANNOTATION
from api.node_state import PackageNodeState, parse_node_state

# Evictions refused this long in a row make a drain "blocked" (a PDB often refuses for a few
# seconds while a replacement pod starts: that is an ordinary drain, not worth a Warning).
BLOCKED_AFTER_SECONDS = 15.0
# A blocked drain rewrites its condition when the blockers change, and its Event at least this often.
REFRESH_SECONDS = 60.0
MAX_LISTED = 10
# Worker and workflow clocks may differ a little: a condition this much older than the window's
# start still belongs to it.
CLOCK_SLACK = timedelta(seconds=5)


@dataclass(frozen=True)
class PdbView:
    """A PodDisruptionBudget as a blocked drain reports it."""

    name: str  # namespace/name
    disruptions_allowed: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0

    def describe(self) -> str:
        """`ns/name (disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1, expectedPods=1)`."""
        return (f"{self.name} (disruptionsAllowed={self.disruptions_allowed}, currentHealthy={self.current_healthy}, "
                f"desiredHealthy={self.desired_healthy}, expectedPods={self.expected_pods})")


def pdb_view(obj: Mapping[str, Any]) -> PdbView:
    """A PdbView from a PodDisruptionBudget's API JSON (policy/v1 or v1beta1)."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return PdbView(
        name=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
        current_healthy=int(status.get("currentHealthy") or 0),
        desired_healthy=int(status.get("desiredHealthy") or 0),
        expected_pods=int(status.get("expectedPods") or 0),
    )


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def evicting_message(pods: int) -> str:
    """The condition message of a drain under way."""
    return f"evicting {pods} pod(s)"


def eviction_refused_message(pods: Sequence[str], pdbs: Sequence[PdbView]) -> str:
    """The condition and Event message of a drain whose evictions are refused."""
    budgets = "; ".join(p.describe() for p in pdbs) or "no PodDisruptionBudget found (the API refused with 429)"
    return f"eviction refused for pod(s) {_listed(sorted(pods))} by PodDisruptionBudget(s): {budgets}"


def protected_pods_message(pods: Sequence[str]) -> str:
    """The condition and Event message of a window waiting for protected pods."""
    return f"waiting for protected pod(s) to finish: {_listed(sorted(pods))}"


@dataclass
class DrainNotice:
    """When a drain counts as blocked and when to write its condition and Event (the caller's clock)."""

    blocked_after_seconds: float = BLOCKED_AFTER_SECONDS
    refresh_seconds: float = REFRESH_SECONDS
    refused_since: float | None = None
    last: tuple[str, str] | None = None
    last_at: float = 0.0

    def eviction_round(self, now: float, refused: bool) -> bool:
        """Record one round of evictions; True once evictions were refused `blocked_after_seconds` in a row."""
        if not refused:
            self.refused_since = None
            return False
        if self.refused_since is None:
            self.refused_since = now
        return now - self.refused_since >= self.blocked_after_seconds

    def due(self, now: float, reason: DrainReason, message: str) -> bool:
        """True when `(reason, message)` should be written now: it changed, or the last write is old."""
        return self.last != (reason.value, message) or now - self.last_at >= self.refresh_seconds

    def written(self, now: float, reason: DrainReason, message: str) -> None:
        """Remember what was written."""
        self.last, self.last_at = (reason.value, message), now

    @property
    def active(self) -> bool:
        """True once a condition with status True was written (it must be ended)."""
        return self.last is not None


@dataclass(frozen=True)
class DrainCondition:
    """The `noderoll.io/Draining` condition of a node."""

    draining: bool
    reason: str
    message: str = ""
    since: str = ""  # lastTransitionTime: when the drain began (status True) or ended

    @property
    def blocked(self) -> bool:
        """True while the drain waits on someone else's pods."""
        return self.draining and self.reason in {r.value for r in DrainReason if r.blocked}


def read_drain_condition(conditions: Iterable[Mapping[str, Any]]) -> DrainCondition | None:
    """The Draining condition among a node's `status.conditions` (API JSON), None when absent."""
    for cond in conditions:
        if cond.get("type") == CONDITION_DRAINING:
            since = cond.get("lastTransitionTime") or ""
            return DrainCondition(
                draining=cond.get("status") == "True",
                reason=str(cond.get("reason") or ""),
                message=str(cond.get("message") or ""),
                since=since if isinstance(since, str) else since.isoformat(),
            )
    return None


def _time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def drains_window(condition: DrainCondition | None, entry: PackageNodeState | None) -> bool:
    """True when the node's drain under way belongs to the window of this package entry.

    The window records its packages `in_progress` before it drains; a condition left True by a
    window that was cut off (its workflow terminated) is older than the next window's entries.
    """
    if condition is None or not condition.draining or entry is None or entry.state is not State.IN_PROGRESS:
        return False
    began, window = _time(condition.since), _time(entry.updated_at)
    if began is None or window is None or began.tzinfo is None or window.tzinfo is None:
        return True
    return began >= window - CLOCK_SLACK


@dataclass(frozen=True)
class DrainBlock:
    """A node whose drain waits on someone else's pods, holding up a package's window there."""

    node: str
    reason: str
    message: str
    since: str


def drain_block(node: str, condition: DrainCondition | None, entry: PackageNodeState | None) -> DrainBlock | None:
    """The block the node's drain puts on the package whose entry is `entry`, if any."""
    if condition is None or not condition.blocked or not drains_window(condition, entry):
        return None
    return DrainBlock(node=node, reason=condition.reason, message=condition.message, since=condition.since)


def drain_blocks(package: str, nodes: Iterable[Mapping[str, Any]]) -> list[DrainBlock]:
    """The blocks on `package` among Node objects (API JSON, e.g. the bridge's cache), by node name."""
    blocks = []
    for obj in nodes:
        condition = read_drain_condition((obj.get("status") or {}).get("conditions") or [])
        if condition is None or not condition.blocked:
            continue  # the common case: no state annotation to parse
        meta = obj.get("metadata") or {}
        state, _ = parse_node_state((meta.get("annotations") or {}).get(NODE_STATE_ANNOTATION))
        block = drain_block(str(meta.get("name", "")), condition, state.packages.get(package))
        if block is not None:
            blocks.append(block)
    return sorted(blocks, key=lambda b: b.node)


def drain_summary(blocks: Sequence[DrainBlock], limit: int = 3, width: int = 300) -> str:
    """One line for a condition message: `drain blocked on 2 node(s): n1 (EvictionRefused: ...); ...`."""
    if not blocks:
        return ""
    parts = [f"{b.node} ({b.reason}: {b.message[:width]})" for b in blocks[:limit]]
    more = f"; and {len(blocks) - limit} more" if len(blocks) > limit else ""
    return f"drain blocked on {len(blocks)} node(s): " + "; ".join(parts) + more
