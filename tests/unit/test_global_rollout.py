"""The promotion across clusters: `planning.clusters.global_rollout` (the global workflow's decisions) and
`planning.clusters.cluster_turns` (a fleet's side). Pure: builders and tables, plus properties (hypothesis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.clusters import ClustersSpec
from api.enums import RolloutPhase
from planning.clusters import cluster_turns as turns
from planning.clusters import global_rollout as rules
from protocol.clusters import ClusterReport, GlobalTurn, GlobalView

T0 = datetime(2026, 12, 1, tzinfo=UTC)
STAGES = [["canary-1"], ["eu-1", "eu-2"], ["us-1"]]


def spec(stages: list[list[str]] = STAGES, soak: int = 600, on_failure: str = "haltAll") -> dict[str, Any]:
    return ClustersSpec.model_validate({"stages": stages, "soakSeconds": soak, "onFailure": on_failure}).model_dump(
        by_alias=True, mode="json")


def report(cluster: str, state: str = "waiting", change: str = "c1", clusters: dict[str, Any] | None = None,
           message: str = "") -> ClusterReport:
    return ClusterReport(cluster=cluster, fleet_workflow_id=f"fleet/{cluster}/gpu", change=change, state=state,
                         clusters=spec() if clusters is None else clusters, message=message)


def state_with(*reports: ClusterReport) -> rules.GlobalState:
    state = rules.GlobalState(policy="gpu")
    for item in reports:
        rules.record_report(state, item)
    return state


def states(state: rules.GlobalState, now: datetime = T0) -> dict[str, str]:
    return {c.cluster: c.state for c in rules.global_view(state, now).clusters}


def test_first_report_grants_stage_one_only() -> None:
    state = state_with(report("canary-1"), report("eu-1"))
    rules.advance(state, T0)
    assert rules.granted(state, "canary-1", "c1")
    assert not rules.granted(state, "eu-1", "c1")
    assert states(state) == {"canary-1": "running", "eu-1": "waiting", "eu-2": "unknown", "us-1": "unknown"}
    assert "waiting for its turn" in rules.turn_for(state, "eu-1", T0).message


def test_next_stage_after_every_cluster_complete_and_the_soak() -> None:
    state = state_with(report("canary-1"), report("eu-1"), report("eu-2"))
    rules.record_report(state, report("canary-1", "complete"))
    wake = rules.advance(state, T0)
    assert wake == T0 + timedelta(seconds=600)
    assert not rules.granted(state, "eu-1", "c1")
    view = rules.global_view(state, T0)
    assert view.phase == RolloutPhase.WAITING.value and "soaking until" in view.message
    assert rules.advance(state, T0 + timedelta(seconds=599)) is not None
    assert not rules.granted(state, "eu-1", "c1")
    assert rules.advance(state, T0 + timedelta(seconds=600)) is None
    assert rules.granted(state, "eu-1", "c1") and rules.granted(state, "eu-2", "c1")
    assert not rules.granted(state, "us-1", "c1")


def test_a_stage_is_complete_only_when_every_cluster_of_it_is() -> None:
    state = state_with(report("canary-1", "complete"), report("eu-1"), report("eu-2"))
    rules.advance(state, T0)
    rules.advance(state, T0 + timedelta(seconds=600))
    rules.record_report(state, report("eu-1", "complete"))
    assert rules.advance(state, T0 + timedelta(days=1)) is None
    assert rules.change_of(state, "c1").stage == 1  # eu-2 has not completed


def test_failure_halts_all_and_resume_does_not_promote_past_it() -> None:
    state = state_with(report("canary-1"), report("eu-1"))
    assert rules.record_report(state, report("canary-1", "failed", message="3 nodes erroring"))
    assert "cluster canary-1 failed change c1: 3 nodes erroring" in state.halted
    rules.advance(state, T0 + timedelta(days=1))
    assert not rules.granted(state, "canary-1", "c1") and not rules.granted(state, "eu-1", "c1")
    assert rules.global_view(state, T0).phase == RolloutPhase.HALTED.value
    state.halted = ""  # resume
    rules.advance(state, T0 + timedelta(days=2))
    assert rules.granted(state, "canary-1", "c1") and not rules.granted(state, "eu-1", "c1")


def test_hold_promotion_halts_nothing_but_promotes_nothing() -> None:
    hold = spec(on_failure="holdPromotion")
    state = state_with(report("canary-1", clusters=hold), report("eu-1", clusters=hold))
    assert not rules.record_report(state, report("canary-1", "failed", clusters=hold))
    assert not state.halted
    rules.advance(state, T0 + timedelta(days=1))
    assert not rules.granted(state, "eu-1", "c1")


def test_a_disagreeing_copy_is_held_until_every_cluster_agrees() -> None:
    other = spec(stages=[["eu-1"], ["canary-1"]])
    state = state_with(report("canary-1"), report("eu-1", clusters=other))
    rules.advance(state, T0)
    assert "differs from the one global/gpu runs" in rules.held_reason(state, "eu-1")
    assert states(state)["eu-1"] == "held"
    assert "held by global/gpu" in rules.turn_for(state, "eu-1", T0).message
    # The edit reaches the other cluster too: the new copy is adopted, nobody is held.
    rules.record_report(state, report("canary-1", clusters=other))
    assert state.adopted == other and not rules.held_reason(state, "eu-1")
    rules.advance(state, T0)
    assert rules.granted(state, "eu-1", "c1")


def test_a_cluster_in_no_stage_is_held() -> None:
    state = state_with(report("canary-1"), report("ap-1"))
    assert "in no stage" in rules.held_reason(state, "ap-1")
    assert not rules.granted(state, "ap-1", "c1")


def test_changes_are_promoted_independently_and_forgotten_oldest_first() -> None:
    state = state_with(report("canary-1", "complete", change="old"), report("canary-1", change="new"))
    rules.advance(state, T0)
    rules.advance(state, T0 + timedelta(days=1))
    assert rules.change_of(state, "old").stage == 1 and rules.change_of(state, "new").stage == 0
    for index in range(rules.KEPT_CHANGES):
        rules.record_report(state, report("canary-1", change=f"n{index}"))
    assert rules.change_of(state, "old") is None and len(state.changes) == rules.KEPT_CHANGES


def test_paused_grants_nothing_new() -> None:
    state = state_with(report("canary-1"))
    state.paused = True
    assert not rules.granted(state, "canary-1", "c1")
    assert "paused" in rules.turn_for(state, "canary-1", T0).message


# --- properties -------------------------------------------------------------------------------

CLUSTERS = ["canary-1", "eu-1", "eu-2", "us-1"]
EVENTS = st.lists(st.tuples(st.sampled_from(CLUSTERS), st.sampled_from(["waiting", "complete", "failed"]),
                            st.integers(min_value=0, max_value=900)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_no_cluster_is_granted_before_every_earlier_stage_completed_and_soaked(events: list[Any]) -> None:
    """Whatever the reports and their times: the first grant of a later stage's cluster comes when
    canary-1 has reported complete for at least the soak (600 s), and a halt grants nobody."""
    state = rules.GlobalState(policy="gpu")
    now = T0
    complete_since: datetime | None = None
    promoted = False
    for cluster, value, seconds in events:
        now += timedelta(seconds=seconds)
        rules.record_report(state, report(cluster, value))
        rules.advance(state, now)
        rollout = rules.change_of(state, "c1")
        if rollout is not None and rollout.states.get("canary-1") == "complete":
            complete_since = complete_since or now
        elif not promoted:
            complete_since = None
        later = [c for c in CLUSTERS[1:] if rules.granted(state, c, "c1")]
        if later and not promoted:
            promoted = True
            assert complete_since is not None and now - complete_since >= timedelta(seconds=600), later
        if state.halted:
            assert not any(rules.granted(state, c, "c1") for c in CLUSTERS)


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_stages_are_granted_in_order_and_never_taken_back(events: list[Any]) -> None:
    state = rules.GlobalState(policy="gpu")
    now, highest = T0, -1
    for cluster, value, seconds in events:
        now += timedelta(seconds=seconds)
        rules.record_report(state, report(cluster, value))
        rules.advance(state, now)
        rollout = rules.change_of(state, "c1")
        if rollout is None:
            continue
        assert rollout.stage >= highest and rollout.stage <= len(STAGES) - 1
        highest = rollout.stage
        for stage in range(rollout.stage):
            assert all(rollout.states.get(c) in ("complete", "failed", "waiting", "running")
                       for c in STAGES[stage]) or rollout.stage > stage


# --- the fleet's side -----------------------------------------------------------------------------


@pytest.mark.parametrize(("granted", "phase", "halted", "before", "expected"), [
    pytest.param("", RolloutPhase.PENDING, False, "", "waiting", id="not-granted"),
    pytest.param("c1", RolloutPhase.PROGRESSING, False, "", "running", id="granted"),
    pytest.param("c1", RolloutPhase.COMPLETE, False, "running", "complete", id="complete"),
    pytest.param("c1", RolloutPhase.FAILED, False, "running", "failed", id="failed"),
    pytest.param("c1", RolloutPhase.HALTED, True, "running", "failed", id="thresholds-halted"),
    pytest.param("c1", RolloutPhase.HALTED, False, "failed", "failed", id="halted-after-failure-stays-failed"),
    pytest.param("c1", RolloutPhase.HALTED, False, "running", "running", id="halted-by-signal"),
])
def test_report_state(granted: str, phase: RolloutPhase, halted: bool, before: str, expected: str) -> None:
    mine = turns.ClusterTurns(granted=granted, state=before)
    assert turns.report_state(mine, "c1", phase, halted).value == expected


def test_a_report_is_sent_once_until_it_changes() -> None:
    mine = turns.ClusterTurns()
    first = report("eu-1")
    assert turns.next_report(mine, first) is first
    assert turns.next_report(mine, report("eu-1", message="other words")) is None
    assert turns.next_report(mine, report("eu-1", "running")) is not None
    assert turns.next_report(mine, report("eu-1", "running", clusters=spec(soak=0))) is not None


def test_a_turn_grants_only_the_current_change() -> None:
    mine = turns.ClusterTurns()
    view = GlobalView(policy="gpu")
    assert not turns.take_turn(mine, GlobalTurn("old", True, "granted", view), "new")
    assert mine.granted == "" and mine.view == view
    assert turns.take_turn(mine, GlobalTurn("new", True, "granted", view), "new")
    assert not turns.take_turn(mine, GlobalTurn("new", True, "granted", view), "new")  # already granted


def test_change_id_follows_the_revisions_only() -> None:
    assert turns.change_id({"a": "r1", "b": "r2"}) == turns.change_id({"b": "r2", "a": "r1"})
    assert turns.change_id({"a": "r1"}) != turns.change_id({"a": "r2"})


# --- visibility: statuses and `noderoll status --global` ---------------------------------------------


def test_status_global_rollout_renders_the_view_one_based() -> None:
    from planning.views.status import RolloutProgress, global_rollout_status, render_package_status

    state = state_with(report("canary-1", "complete"), report("eu-1"))
    state.halted = "cluster eu-2 failed change c1: 1 node erroring"
    view = rules.global_view(state, T0)
    shown = global_rollout_status(view)
    assert shown is not None and (shown.stage, shown.stages, shown.phase) == (1, 3, RolloutPhase.HALTED)
    assert [(c.name, c.stage, c.state) for c in shown.clusters] == [
        ("canary-1", 1, "complete"), ("eu-1", 2, "waiting"), ("eu-2", 2, "unknown"), ("us-1", 3, "unknown")]
    status = render_package_status(RolloutProgress(), 1, promotion=view)
    assert status["globalRollout"]["halted"].startswith("cluster eu-2 failed")
    assert "globalRollout" not in render_package_status(RolloutProgress(), 1)


def test_a_global_halt_is_announced_once_per_reason() -> None:
    from planning.views.status import global_halt_event

    halted = GlobalView(policy="gpu", phase="Halted", halted="cluster eu-2 failed change c1: 1 node erroring")
    assert global_halt_event(None, halted) == halted.halted  # the status does not show it yet
    assert global_halt_event({"phase": "Progressing"}, halted) == halted.halted
    assert global_halt_event({"halted": halted.halted}, halted) == ""  # shown: announced already
    assert global_halt_event({"halted": halted.halted}, GlobalView(halted="halted by the operator")) != ""
    assert global_halt_event(None, GlobalView(phase="Progressing")) == ""
    assert global_halt_event({"halted": "x"}, None) == ""


def test_the_global_table_names_every_cluster_and_the_stage() -> None:
    from rich.console import Console

    from cli.global_status import global_table

    state = state_with(report("canary-1", "complete"), report("eu-1"))
    rules.advance(state, T0)
    console = Console(width=200, record=True)
    console.print(global_table(rules.global_view(state, T0)))
    text = console.export_text()
    assert "global/gpu  Waiting  stage 1 of 3  change c1" in text
    for line in ("canary-1  1      complete", "eu-1      2      waiting", "us-1      3      unknown"):
        assert line in text, text


def ended(cluster: str, clusters: dict[str, Any] | None = None) -> ClusterReport:
    return ClusterReport(cluster=cluster, fleet_workflow_id=f"fleet/{cluster}/gpu", change="", state="complete",
                         clusters=spec() if clusters is None else clusters, ended=True)


def test_finished_once_every_staged_cluster_ended() -> None:
    every = ["canary-1", "eu-1", "eu-2", "us-1"]
    state = state_with(*(report(c, "complete") for c in every))
    for cluster in every[:-1]:
        rules.record_report(state, ended(cluster))
        assert not rules.finished(state), cluster
    assert [c for c, _ in rules.live_fleets(state)] == ["us-1"]  # the ended fleets are not answered
    rules.record_report(state, ended("us-1"))
    assert rules.finished(state) and rules.live_fleets(state) == []


def test_a_staged_cluster_never_heard_from_keeps_it_open() -> None:
    """eu-1, eu-2 and us-1 never reported: their fleets may still come, and need canary-1's `complete`."""
    state = state_with(report("canary-1", "complete"), ended("canary-1"))
    rules.advance(state, T0)  # the soak begins
    assert not rules.finished(state)
    rules.record_report(state, report("eu-1"))  # eu-1's fleet comes after canary-1's ended
    rules.advance(state, T0 + timedelta(seconds=601))
    assert rules.granted(state, "eu-1", "c1")  # canary-1's complete is still there
    for cluster in ["eu-1", "eu-2", "us-1"]:
        rules.record_report(state, report(cluster, "complete"))
        rules.record_report(state, ended(cluster))
    assert rules.finished(state)


def test_a_report_after_ended_counts_again() -> None:
    every = ["canary-1", "eu-1", "eu-2", "us-1"]
    state = state_with(*(report(c, "complete") for c in every), *(ended(c) for c in every))
    assert rules.finished(state)
    rules.record_report(state, report("canary-1", change="c2"))  # a new change set in canary-1
    assert not rules.finished(state) and "canary-1" not in state.ended
    assert rules.granted(state, "canary-1", "c2")


def test_an_ended_clusters_copy_no_longer_holds_the_others() -> None:
    old = spec([["canary-1"], ["eu-1"]])
    new = spec([["eu-1"], ["canary-1"]])
    state = state_with(report("canary-1", clusters=old), report("eu-1", clusters=old))
    rules.record_report(state, report("eu-1", clusters=new))
    assert rules.held_reason(state, "eu-1")  # canary-1's copy differs
    rules.record_report(state, ended("canary-1", clusters=old))
    assert state.adopted == new and not rules.held_reason(state, "eu-1")


def test_the_ended_mark_is_part_of_the_report_key_only_when_set() -> None:
    plain = report("eu-1", "complete")
    # The keys fleets carry from before `ended` existed stay the same (no report sent again for nothing).
    assert turns.report_key(plain) == json.dumps(["c1", "complete", plain.clusters], sort_keys=True)
    assert turns.report_key(ClusterReport(**{**plain.__dict__, "ended": True})) != turns.report_key(plain)


@pytest.mark.parametrize("release", [pytest.param(True, id="released"), pytest.param(False, id="recorded-before")])
def test_a_cluster_whose_fleet_ended_holds_no_later_stage(release: bool) -> None:
    """canary-1's fleet ends before it completes (its Package went, or its policy dropped spec.clusters): the
    next stage does not wait for it for ever (runs recorded before the rule still do)."""
    state = state_with(report("canary-1", "running"), report("eu-1"), report("eu-2"))
    state.ended_release = release
    rules.record_report(state, ended("canary-1"))
    rules.advance(state, T0)
    rules.advance(state, T0 + timedelta(seconds=601))
    assert rules.granted(state, "eu-1", "c1") is release
    if release:
        assert "waiting for eu-1, eu-2" in rules.global_view(state, T0).message
