"""Forgetting a node's recorded state (`noderoll node reset`, the node signal `reset`). Pure (no I/O).

The node workflow, the single writer of `noderoll.io/state`, applies a reset between windows: it
reads the node, calls `reset_state` and writes what it returns with its usual state write. Rules:
* no packages named: the whole record is forgotten (an empty record: the node has nothing
  recorded, so the next window of each Package installs it from scratch);
* packages named: only their entries go; the others stay as they are;
* an unreadable annotation (not JSON, not the schema) cannot be edited entry by entry: any reset
  replaces it with an empty record. This is the way out of a held node (docs/operations.md);
* a failed GPU verify recorded next to the packages (`verifyFailed`, api/verify.py) goes with the
  whole record, and names only the packages left after a partial reset (none left: it goes);
* the node's `noderoll.io/status` label follows the record left (`waiting` when it is empty).
The fleets notice the change (the bridge signals `nodes_changed` when a record disappears) and ask
the node again for every Package whose work is pending again (`planning.rollout.fleet_state.refresh_targets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from api.enums import NodeStatus, State
from api.node_state import NodeState, VerifyFailed, dump_node_state, parse_node_state
from planning.node.window import node_status


@dataclass(frozen=True)
class ResetOutcome:
    """What a reset writes: the new annotation, the label, and what it forgot (for the node's Event)."""

    annotation: str
    status: NodeStatus
    erroring: bool
    forgotten: list[str] = field(default_factory=list)
    # Packages named that the record did not hold.
    unknown: list[str] = field(default_factory=list)
    # Set when the annotation could not be read (it is replaced whole).
    problem: str | None = None

    @property
    def message(self) -> str:
        """One line for the node's Event and logs."""
        if self.problem is not None:
            return f"unreadable noderoll.io/state replaced by an empty record ({self.problem})"
        parts = [f"forgot {', '.join(self.forgotten)}" if self.forgotten else "nothing recorded to forget"]
        if self.unknown:
            parts.append(f"not recorded: {', '.join(self.unknown)}")
        return "; ".join(parts)


def reset_state(annotation: str | None, packages: Sequence[str]) -> ResetOutcome:
    """The record left after forgetting `packages` (all of them when empty) from `annotation` (module rules)."""
    recorded, problem = parse_node_state(annotation)
    if problem is not None:
        return ResetOutcome(dump_node_state(NodeState()), NodeStatus.WAITING, False, [], [], problem)
    names = sorted(set(packages)) or sorted(recorded.packages)
    forgotten = [n for n in names if n in recorded.packages]
    unknown = [n for n in names if n not in recorded.packages]
    left = NodeState(packages={n: e for n, e in recorded.packages.items() if n not in forgotten},
                     verify_failed=_verify_left(recorded, sorted(set(packages))))
    status = node_status(left, in_window=False) if left.packages else NodeStatus.WAITING
    erroring = any(e.state is State.ERRORING for e in left.packages.values()) or left.verify_failed is not None
    return ResetOutcome(dump_node_state(left), status, erroring, forgotten, unknown)


def _verify_left(recorded: NodeState, named: list[str]) -> VerifyFailed | None:
    """The failed verify a reset leaves: none after a whole reset, else the one naming the packages left."""
    record = recorded.verify_failed
    if record is None or not named:
        return None
    packages = [p for p in record.packages if p not in named]
    return record.model_copy(update={"packages": packages}) if packages else None
