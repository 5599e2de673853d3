"""Drain-ahead (planning/rollout/drain_ahead.py, planning.rollout.fleet_state.preview_next): which nodes are marked, when
their windows may start, when marks go, and the shared claim on a Node; with hypothesis properties."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from api.policy import DeploymentPolicySpec
from planning.rollout import batches
from planning.rollout import fleet_state as fs
from planning.rollout.drain_ahead import (
    DURATIONS_KEPT,
    UNMARK_EVERY,
    AheadInput,
    expected_start,
    keep_duration,
    owners_after,
    plan,
)
from planning.rollout.fleet_targets import FleetSelection, NodeTargets
from tests.unit.fleet_builders import a_fleet_spec, an_entry

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    return at(seconds).isoformat()


def test_a_batch_node_is_marked_then_ready_after_the_seconds() -> None:
    first = plan(AheadInput(60, at(0), to_send=["a", "b"]))
    assert first.mark == ["a", "b"] and first.ready == [] and first.wake_at == at(60)
    marked = {"a": iso(0), "b": iso(10)}
    later = plan(AheadInput(60, at(65), marked=marked, to_send=["a", "b"]))
    assert later.mark == [] and later.ready == ["a"] and later.wake_at == at(70)
    assert plan(AheadInput(60, at(70), marked=marked, to_send=["a", "b"])).ready == ["a", "b"]


def test_the_predicted_batch_is_marked_seconds_before_it_is_expected() -> None:
    early = plan(AheadInput(60, at(0), next_batch=["c"], next_start=at(100)))
    assert early.mark == [] and early.wake_at == at(40)
    due = plan(AheadInput(60, at(40), next_batch=["c"], next_start=at(100)))
    assert due.mark == ["c"]


def test_marks_go_when_a_node_leaves_the_plan_and_are_gathered_while_windows_are_out() -> None:
    marked = {"a": iso(0), "b": iso(0), "gone": iso(0)}
    # a's window answered, gone left the plan; b is still out: removals wait for the next write ...
    held = plan(AheadInput(60, at(100), marked=marked, in_flight=["b"], last_write=at(90)))
    assert held.unmark == [] and held.wake_at == at(90) + UNMARK_EVERY
    # ... at most UNMARK_EVERY, or go with new marks, or once nothing is out.
    assert plan(AheadInput(60, at(150), marked=marked, in_flight=["b"], last_write=at(90))).unmark == ["a", "gone"]
    assert plan(AheadInput(60, at(100), marked=marked, in_flight=["b"], to_send=["n"],
                           last_write=at(90))).unmark == ["a", "gone"]
    assert plan(AheadInput(60, at(100), marked=marked, last_write=at(90))).unmark == ["a", "b", "gone"]


def test_drain_ahead_off_removes_every_mark_and_holds_nothing() -> None:
    off = plan(AheadInput(0, at(0), marked={"a": iso(0)}, in_flight=["a"], to_send=["b"]))
    assert off.unmark == ["a"] and off.ready == ["b"] and off.mark == []


def test_a_window_already_out_is_not_marked() -> None:
    assert plan(AheadInput(60, at(0), in_flight=["a"])).mark == []


def test_expected_start_and_durations() -> None:
    assert expected_start("", [30.0]) is None
    assert expected_start(iso(0), []) == at(0)
    assert expected_start(iso(0), [10.0, 30.0, 1000.0], 5) == at(35)
    durations: list[float] = []
    for seconds in range(DURATIONS_KEPT + 5):
        keep_duration(durations, float(seconds))
    assert len(durations) == DURATIONS_KEPT and durations[-1] == DURATIONS_KEPT + 4


def test_claims_are_per_fleet_label_and_taint_follow_them() -> None:
    one = owners_after("", "fleet/a", want=True, taint=False)
    assert (one.label, one.taint) == (True, False)
    two = owners_after(one.annotation() or "", "fleet/b", want=True, taint=True)
    assert (two.label, two.taint) == (True, True) and set(two.owners) == {"fleet/a", "fleet/b"}
    # fleet/b releases: fleet/a's claim keeps the label, the taint goes with b's.
    released = owners_after(two.annotation() or "", "fleet/b", want=False, taint=False)
    assert (released.label, released.taint) == (True, False)
    last = owners_after(released.annotation() or "", "fleet/a", want=False, taint=False)
    assert (last.label, last.taint, last.annotation()) == (False, False, None)
    assert owners_after("not json", "fleet/a", want=False, taint=False).owners == {}
    assert json.loads(owners_after("[1]", "fleet/a", True, True).annotation() or "") == {"fleet/a": {"taint": True}}


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 600), st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 900)), max_size=6),
       st.sets(st.sampled_from("abcdef")), st.sets(st.sampled_from("abcdef")), st.integers(0, 1200))
def test_no_window_starts_before_its_mark_is_seconds_old(seconds: int, marks: list[tuple[str, int]],
                                                        to_send: set[str], flight: set[str], now: int) -> None:
    marked = {node: iso(t) for node, t in marks if t <= now}
    to_send -= flight
    result = plan(AheadInput(seconds, at(now), marked=marked, in_flight=flight, to_send=to_send))
    for node in result.ready:
        assert node in marked and datetime.fromisoformat(marked[node]) + timedelta(seconds=seconds) <= at(now)
    assert not set(result.unmark) & (flight | to_send), "a node out or about to go keeps its mark"
    assert set(result.mark) <= to_send and not set(result.mark) & set(marked)
    if set(to_send) - set(result.ready):
        assert result.wake_at is not None and result.wake_at > at(now)


def test_preview_is_the_next_batch_as_if_the_batch_out_succeeded() -> None:
    policy = DeploymentPolicySpec.model_validate(
        {"default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
    state = fs.FleetState()
    fs.set_spec(state, a_fleet_spec(an_entry("pkg")))
    selection = FleetSelection({f"n{i}": NodeTargets(pending=["pkg"]) for i in range(6)})
    fs.start_wave(state, selection, policy, "fleet/gpu")
    assert state.planner is not None
    first = batches.next_batch(state.planner, fs.startable(state))
    preview = fs.preview_next(state, policy)
    assert len(first) == 2 and len(preview) == 2 and not set(first) & set(preview)
    assert state.planner.current_batch == first and state.planner.batch_number == 1, "the preview changes nothing"
    batches.record_batch_result(state.planner, first, [])
    assert batches.next_batch(state.planner, fs.startable(state) - set(first)) == preview
