"""What a blocked node shows, and the guards of its writer (planning/node/node_marks.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.enums import NodeMarkKind
from planning.node.node_marks import NodeMark, decide_mark, listing_marks
from planning.node.targets import NodeView

GARBAGE = "{{{ not json"
COMPLETE = json.dumps({"packages": {"pkg": {"version": "1.0.0", "stage": "config", "state": "complete"}}})
TAINT = "taints not tolerated: dedicated=infer:NoSchedule"
HELD = "noderoll.io/state unreadable: not JSON; node held"


def node(name: str, raw: str = "", label: str = "", malformed: bool = False) -> NodeView:
    return NodeView(name, {}, state_annotation=raw, status_label=label, state_malformed=malformed)


def kinds(marks: list[NodeMark]) -> dict[str, NodeMarkKind]:
    return {m.node: m.kind for m in marks}


def test_a_listing_marks_only_what_the_nodes_do_not_show_yet() -> None:
    nodes = [
        node("held-new", GARBAGE, "complete"),                 # was complete, now garbage
        node("held-shown", GARBAGE, "blocked", malformed=True),  # shown already: nothing
        node("held-relabelled", GARBAGE, "waiting", malformed=True),  # someone changed the label
        node("taint-new", COMPLETE, ""),
        node("taint-shown", "", "blocked"),
        node("taint-erroring", "", "erroring"),                 # erroring is the stronger label
        node("repaired", "", "blocked", malformed=True),        # removed by an operator
        node("fine", COMPLETE, "complete"),
        node("dependency-wait", "", ""),                       # waits are the fleet's own order
        node("running", GARBAGE, "in-progress"),                # a window owns it
    ]
    blocked = {"held-new": HELD, "held-shown": HELD, "held-relabelled": HELD, "taint-new": TAINT,
               "taint-shown": TAINT, "taint-erroring": TAINT, "running": HELD}
    marks = listing_marks(nodes, blocked)
    assert kinds(marks) == {
        "held-new": NodeMarkKind.STATE_MALFORMED,
        "held-relabelled": NodeMarkKind.STATE_MALFORMED,
        "taint-new": NodeMarkKind.BLOCKED,
        "repaired": NodeMarkKind.STATE_REPAIRED,
    }
    assert next(m for m in marks if m.node == "taint-new").reason == TAINT
    assert [m.node for m in marks] == sorted(m.node for m in marks)


def test_a_malformed_mark_writes_condition_label_and_a_warning_event_naming_the_fix() -> None:
    write = decide_mark(NodeMark("n1", NodeMarkKind.STATE_MALFORMED, HELD), node("n1", GARBAGE, "complete"))
    assert write is not None and write.set_label and write.label == "blocked"
    assert write.malformed is True and write.condition_reason == "ParseError"
    assert write.condition_message.startswith("noderoll.io/state unreadable: not JSON")
    assert write.event is not None and write.event.warning and write.event.reason == "StateMalformed"
    assert "kubectl annotate node n1 noderoll.io/state-" in write.event.message
    # One Event per distinct annotation: the same garbage gives the same key, another one a new key.
    again = decide_mark(NodeMark("n1", NodeMarkKind.STATE_MALFORMED), node("n1", GARBAGE, "waiting"))
    other = decide_mark(NodeMark("n1", NodeMarkKind.STATE_MALFORMED), node("n1", "[1]", "complete"))
    assert again is not None and other is not None and again.event and other.event
    assert again.event.key == write.event.key != other.event.key


def test_an_erroring_node_keeps_its_label_but_shows_the_malformed_state() -> None:
    write = decide_mark(NodeMark("n1", NodeMarkKind.STATE_MALFORMED), node("n1", GARBAGE, "erroring"))
    assert write is not None and not write.set_label and write.malformed is True


@pytest.mark.parametrize("kind", list(NodeMarkKind))
def test_nothing_is_written_while_a_window_runs(kind: NodeMarkKind) -> None:
    for raw, malformed in ((GARBAGE, False), ("", True), (COMPLETE, False)):
        assert decide_mark(NodeMark("n1", kind), node("n1", raw, "in-progress", malformed)) is None


def test_a_mark_whose_fact_changed_since_the_listing_writes_nothing() -> None:
    # Repaired before the malformed mark was written; garbled again before the repaired one was.
    assert decide_mark(NodeMark("n1", NodeMarkKind.STATE_MALFORMED), node("n1", COMPLETE, "complete")) is None
    assert decide_mark(NodeMark("n1", NodeMarkKind.STATE_REPAIRED), node("n1", GARBAGE, "blocked", True)) is None
    assert decide_mark(NodeMark("n1", NodeMarkKind.BLOCKED), node("n1", "", "erroring")) is None


def test_a_repaired_node_shows_what_its_record_says() -> None:
    removed = decide_mark(NodeMark("n1", NodeMarkKind.STATE_REPAIRED), node("n1", "", "blocked", True))
    assert removed is not None and removed.set_label and removed.label is None  # nothing recorded: no label
    assert removed.malformed is False and removed.event is not None and not removed.event.warning
    fixed = decide_mark(NodeMark("n1", NodeMarkKind.STATE_REPAIRED), node("n1", COMPLETE, "blocked", True))
    assert fixed is not None and fixed.label == "complete"
    erroring = decide_mark(NodeMark("n1", NodeMarkKind.STATE_REPAIRED), node("n1", COMPLETE, "erroring", True))
    assert erroring is not None and not erroring.set_label and erroring.malformed is False


LABELS = st.sampled_from(["", "waiting", "in-progress", "complete", "erroring", "blocked", "exploded"])
ANNOTATIONS = st.sampled_from(["", GARBAGE, "[1, 2]", COMPLETE, '{"packages": {"x": {"stage": "warp"}}}'])


@given(kind=st.sampled_from(list(NodeMarkKind)), raw=ANNOTATIONS, label=LABELS, malformed=st.booleans())
def test_a_mark_never_takes_a_windows_or_an_erroring_label_and_is_idempotent(
    kind: NodeMarkKind, raw: str, label: str, malformed: bool
) -> None:
    before = node("n1", raw, label, malformed)
    write = decide_mark(NodeMark("n1", kind), before)
    if write is None:
        return
    if label in ("in-progress", "erroring"):
        assert not write.set_label
    after = replace(
        before,
        status_label=(write.label or "") if write.set_label else label,
        state_malformed=write.malformed if write.malformed is not None else malformed,
    )
    # Written once, the same mark finds everything shown and writes nothing more.
    assert decide_mark(NodeMark("n1", kind), after) is None
