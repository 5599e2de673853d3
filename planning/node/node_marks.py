"""What a node that a fleet cannot update shows, and when it may be written. Pure (no I/O).

A targeted node can be blocked without any node window running on it: an untolerated taint, or a
`noderoll.io/state` annotation that cannot be read (the node is held: no window may overwrite it).
Such a node must still say so on itself: label `noderoll.io/status=blocked`, and for an unreadable
state the condition `noderoll.io/StateMalformed` and a Warning Event `StateMalformed`.

Who writes (docs/architecture.md "Node state"): the node workflow stays the only writer of the
state annotation, and owns the label and conditions while its window runs. A mark is written by the
activity `mark_blocked_nodes`, which the fleet calls after a listing (and the node workflow when
it finds garbage itself), under two guards:
* `listing_marks` sends only what the listed node does not show yet, so a steady state costs no
  call at all;
* `decide_mark` is decided again by the activity on the node as it reads it right before writing,
  and the write carries that read's resourceVersion: nothing is written while the label says
  `in-progress` (a window owns the node), nothing when the fact changed meanwhile, and a node
  written by anyone in between is read and decided again (409). The label `blocked` never replaces
  `in-progress`, `erroring` or `verify-failed`; the next window's state write replaces `blocked` as usual.

When an unreadable annotation reads again (removed or repaired by an operator), the condition turns
False (`STATE_REPAIRED`): by the next window's state write, or by a fleet's listing when no
window is due (a repair to a complete record).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from api.enums import NodeMarkKind, NodeStatus
from api.keys import EVENT_STATE_MALFORMED, NODE_STATE_ANNOTATION, STATE_MALFORMED_REASON
from api.node_state import held_reason, parse_node_state
from planning.node.targets import NodeView
from planning.node.window import node_status

EVENT_STATE_REPAIRED = "StateRepaired"
REASON_READABLE = "Readable"
READABLE_MESSAGE = f"{NODE_STATE_ANNOTATION} is readable"
# Labels a mark never replaces: a running window's, an erroring node's and a failed verify's (stronger), and its own.
_KEPT_LABELS = frozenset({NodeStatus.IN_PROGRESS.value, NodeStatus.ERRORING.value, NodeStatus.BLOCKED.value,
                          NodeStatus.VERIFY_FAILED.value})


@dataclass(frozen=True)
class NodeMark:
    """Show `kind` on `node` (the activity decides again before writing); `reason` is why."""

    node: str
    kind: NodeMarkKind
    reason: str = ""


@dataclass(frozen=True)
class MarkEvent:
    """An Event on the Node; `key` makes it idempotent (one per distinct annotation)."""

    reason: str
    message: str
    key: str
    warning: bool = False


@dataclass(frozen=True)
class MarkWrite:
    """What to write on the node: the label (None removes it), the StateMalformed condition, an Event."""

    set_label: bool = False
    label: str | None = None
    # Status of `noderoll.io/StateMalformed` to write; None leaves the condition alone.
    malformed: bool | None = None
    condition_reason: str = ""
    condition_message: str = ""
    event: MarkEvent | None = None


def wants_blocked_label(label: str) -> bool:
    """True when `label` may become `blocked` (not a running window's, not erroring, not blocked yet)."""
    return label not in _KEPT_LABELS


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def listing_marks(nodes: Sequence[NodeView], blocked: Mapping[str, str]) -> list[NodeMark]:
    """The marks a listing calls for, sorted by node: only what the nodes do not show already.
    `blocked`: node -> why no window can update it (the fleet's selection)."""
    marks = []
    for node in sorted(nodes, key=lambda n: n.name):
        if node.status_label == NodeStatus.IN_PROGRESS.value:
            continue  # a window owns the node; its own state write says what is true
        problem = parse_node_state(node.state_annotation)[1]
        reason = blocked.get(node.name)
        if reason is not None and problem:
            if not node.state_malformed or wants_blocked_label(node.status_label):
                marks.append(NodeMark(node.name, NodeMarkKind.STATE_MALFORMED, reason))
        elif reason is not None:
            if wants_blocked_label(node.status_label):
                marks.append(NodeMark(node.name, NodeMarkKind.BLOCKED, reason))
        elif node.state_malformed and not problem:
            # Whichever package lists it: the annotation reads again, whatever the package.
            marks.append(NodeMark(node.name, NodeMarkKind.STATE_REPAIRED))
    return marks


def decide_mark(mark: NodeMark, current: NodeView) -> MarkWrite | None:
    """What to write for `mark` on the node as read now; None: nothing (see the module guards)."""
    if current.status_label == NodeStatus.IN_PROGRESS.value:
        return None
    recorded, problem = parse_node_state(current.state_annotation)
    if mark.kind is NodeMarkKind.BLOCKED:
        if not wants_blocked_label(current.status_label):
            return None
        return MarkWrite(set_label=True, label=NodeStatus.BLOCKED.value)
    if mark.kind is NodeMarkKind.STATE_MALFORMED:
        if not problem:
            return None  # removed or repaired since the listing
        if current.state_malformed and not wants_blocked_label(current.status_label):
            return None  # shown already (the first problem found stays the message)
        reason = held_reason(problem)
        return MarkWrite(
            set_label=wants_blocked_label(current.status_label),
            label=NodeStatus.BLOCKED.value,
            malformed=True,
            condition_reason=STATE_MALFORMED_REASON,
            condition_message=reason,
            event=MarkEvent(
                EVENT_STATE_MALFORMED,
                f"{reason}. To release the node: kubectl annotate node {current.name} {NODE_STATE_ANNOTATION}- "
                "(the node is then fresh: each package's checks decide), or repair the JSON",
                key=f"state-malformed/{_digest(current.state_annotation)}",
                warning=True,
            ),
        )
    if problem or not current.state_malformed:
        return None
    # Repaired: a `blocked` label of ours goes back to what the record says (none when it is empty);
    # a fleet that still cannot reach the node labels it again at its next listing.
    label = node_status(recorded, in_window=False).value if recorded.packages else None
    return MarkWrite(
        set_label=current.status_label == NodeStatus.BLOCKED.value,
        label=label,
        malformed=False,
        condition_reason=REASON_READABLE,
        condition_message=READABLE_MESSAGE,
        event=MarkEvent(
            EVENT_STATE_REPAIRED,
            f"{NODE_STATE_ANNOTATION} reads again: the node is no longer held",
            key=f"state-repaired/{_digest(current.state_annotation)}",
        ),
    )
