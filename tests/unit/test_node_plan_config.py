"""Finished versus unfinished recorded operations and config changes (planning/node/node_plan.py rule 4, issue #12).

A finished operation plus a new desired config is a new config operation (always its `config`
stage); an unfinished one resumes where it stopped, from `config` again when the desired config is
not the one it was applying.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.enums import InterruptType, PlanAction, Stage, State
from api.interrupts import InterruptRequest
from api.node_state import PackageNodeState, config_hashes
from api.package import PackageSpec
from planning.node.node_plan import plan_package, stage_sequence

A, U, C, INT, P, X = (
    Stage.APPLY, Stage.UPGRADE, Stage.CONFIG, Stage.INTERRUPT, Stage.POST_INTERRUPT, Stage.UNINSTALL,
)
B_SERVICE = {"type": "service", "services": ["b"]}
FIRST = {"a.conf": "a=1", "b.conf": "b=1"}
A_CHANGED = {"a.conf": "a=2", "b.conf": "b=1"}
B_CHANGED = {"a.conf": "a=2", "b.conf": "b=2"}


def spec(config: dict[str, str], **extra: Any) -> PackageSpec:
    base = {"version": "1.0.0", "image": "x/p:1.0.0", "config": config, "configInterrupts": {"b.conf": B_SERVICE}}
    return PackageSpec.model_validate(base | extra)


def entry(action: PlanAction | None, stage: Stage, state: State, config: dict[str, str],
          target: dict[str, str] | None = None) -> PackageNodeState:
    return PackageNodeState(version="1.0.0", image="x/p:1.0.0", action=action, stage=stage, state=state,
                            config=config_hashes(config), target_config=None if target is None else config_hashes(target))


def test_the_issue_scenario_runs_config_for_the_b_conf_change() -> None:
    # The a.conf change finished: {action: config, stage: config, state: complete} with its hashes.
    after_a = entry(PlanAction.CONFIG, C, State.COMPLETE, A_CHANGED)
    plan = plan_package("p", spec(B_CHANGED), after_a, uninstall=False)
    assert (plan.action, plan.stages, plan.changed_config) == (PlanAction.CONFIG, (C, INT, P), ("b.conf",))
    assert plan.interrupt == InterruptRequest(InterruptType.SERVICE, ("b",)) and not plan.resumed


REBOOT = {"interrupt": {"type": "reboot"}}


@pytest.mark.parametrize(
    ("recorded", "desired", "action", "stages"),
    [
        pytest.param(entry(PlanAction.INSTALL, C, State.COMPLETE, FIRST), spec(FIRST, **REBOOT),
                     PlanAction.NONE, (), id="install-finished-then-spec-gains-an-interrupt-no-reboot"),
        pytest.param(entry(PlanAction.INSTALL, C, State.COMPLETE, FIRST), spec(B_CHANGED, **REBOOT),
                     PlanAction.CONFIG, (C, INT, P), id="install-finished-then-config-change"),
        pytest.param(entry(PlanAction.INSTALL, P, State.COMPLETE, FIRST), spec(A_CHANGED, **REBOOT),
                     PlanAction.CONFIG, (C,), id="install-with-interrupt-finished-then-config-change"),
        pytest.param(entry(PlanAction.UPGRADE, C, State.COMPLETE, FIRST), spec(B_CHANGED),
                     PlanAction.CONFIG, (C, INT, P), id="upgrade-finished-then-config-change"),
        pytest.param(entry(PlanAction.DOWNGRADE, P, State.COMPLETE, FIRST), spec(A_CHANGED),
                     PlanAction.CONFIG, (C,), id="downgrade-finished-then-config-change"),
        pytest.param(entry(PlanAction.CONFIG, P, State.COMPLETE, B_CHANGED), spec(FIRST),
                     PlanAction.CONFIG, (C, INT, P), id="config-with-interrupt-finished-then-config-change"),
        pytest.param(entry(None, C, State.COMPLETE, FIRST), spec(B_CHANGED),
                     PlanAction.CONFIG, (C, INT, P), id="entry-without-action-finished-then-config-change"),
        pytest.param(entry(PlanAction.CONFIG, C, State.COMPLETE, A_CHANGED), spec(A_CHANGED),
                     PlanAction.NONE, (), id="config-finished-nothing-changed"),
    ],
)
def test_finished_operation_and_a_new_config_is_a_new_config_operation(
    recorded: PackageNodeState, desired: PackageSpec, action: PlanAction, stages: tuple[Stage, ...]
) -> None:
    plan = plan_package("p", desired, recorded, uninstall=False)
    assert (plan.action, plan.stages, plan.resumed) == (action, stages, False), plan.reason


@pytest.mark.parametrize(
    ("recorded", "desired", "stages"),
    [
        pytest.param(entry(PlanAction.INSTALL, A, State.ERRORING, {}, FIRST), spec(B_CHANGED, **REBOOT),
                     (A, C, INT, P), id="install-stopped-at-apply-newer-config-applied-by-its-config-stage"),
        pytest.param(entry(PlanAction.INSTALL, A, State.COMPLETE, {}, FIRST), spec(FIRST, **REBOOT),
                     (C, INT, P), id="install-apply-complete-is-never-the-end"),
        pytest.param(entry(PlanAction.INSTALL, INT, State.ERRORING, {}, FIRST), spec(FIRST, **REBOOT),
                     (INT, P), id="install-stopped-at-interrupt-same-config"),
        pytest.param(entry(PlanAction.INSTALL, INT, State.COMPLETE, {}, FIRST), spec(FIRST, **REBOOT),
                     (P,), id="install-interrupt-complete-is-never-the-end"),
        pytest.param(entry(PlanAction.INSTALL, P, State.ERRORING, {}, FIRST), spec(B_CHANGED, **REBOOT),
                     (C, INT, P), id="install-stopped-after-config-newer-config-reruns-config"),
        pytest.param(entry(PlanAction.UPGRADE, U, State.IN_PROGRESS, FIRST, FIRST), spec(FIRST),
                     (U, C), id="upgrade-stopped-at-upgrade"),
        pytest.param(entry(PlanAction.CONFIG, INT, State.ERRORING, FIRST, B_CHANGED), spec(B_CHANGED),
                     (INT, P), id="config-stopped-at-interrupt-same-config"),
        pytest.param(entry(PlanAction.CONFIG, P, State.ERRORING, FIRST, B_CHANGED), spec(B_CHANGED),
                     (P,), id="config-stopped-at-post-interrupt-same-config"),
        pytest.param(entry(PlanAction.CONFIG, C, State.ERRORING, FIRST, B_CHANGED), spec(A_CHANGED),
                     (C, INT, P), id="config-stopped-at-config-newer-config-keeps-the-b-interrupt"),
        pytest.param(entry(PlanAction.CONFIG, INT, State.ERRORING, FIRST, B_CHANGED), spec(A_CHANGED),
                     (C, INT, P), id="config-stopped-at-interrupt-newer-config-reruns-config"),
        pytest.param(entry(PlanAction.CONFIG, INT, State.ERRORING, FIRST), spec(B_CHANGED),
                     (C, INT, P), id="config-stopped-at-interrupt-target-unknown-reruns-config"),
    ],
)
def test_unfinished_operation_resumes_where_it_stopped_unless_its_config_is_stale(
    recorded: PackageNodeState, desired: PackageSpec, stages: tuple[Stage, ...]
) -> None:
    plan = plan_package("p", desired, recorded, uninstall=False)
    assert (plan.action, plan.stages, plan.resumed) == (recorded.action, stages, True), plan.reason


def test_a_newer_config_joining_an_unfinished_change_keeps_both_changes_interrupts() -> None:
    # b.conf was being changed (its interrupt failed); the desired config now reverts b.conf and
    # changes a.conf: the host has seen b=2, so b.conf's interrupt still fires.
    stopped = entry(PlanAction.CONFIG, INT, State.ERRORING, A_CHANGED, B_CHANGED)
    plan = plan_package("p", spec({"a.conf": "a=3", "b.conf": "b=1"}), stopped, uninstall=False)
    assert plan.stages == (C, INT, P) and plan.changed_config == ("a.conf", "b.conf")
    assert "not the one it applied" in plan.reason


def test_uninstall_under_way_is_unaffected_by_config() -> None:
    requested = spec(B_CHANGED, uninstall={"enabled": True, "apply": True}, **REBOOT)
    mid = entry(PlanAction.UNINSTALL, X, State.COMPLETE, FIRST)
    assert plan_package("p", requested, mid, uninstall=False).stages == (INT,)


# ---- properties over random recorded entries and desired specs -------------------------------

# Desired configs hold both keys (a configInterrupts key must match one); recorded ones may not.
DESIRED = [FIRST, A_CHANGED, B_CHANGED, {"a.conf": "a=1", "b.conf": "b=3"}]
RECORDED = [*DESIRED, {}, {"a.conf": "a=1"}]
ACTIONS = [None, PlanAction.INSTALL, PlanAction.UPGRADE, PlanAction.DOWNGRADE, PlanAction.CONFIG]


def finished(rec: PackageNodeState) -> bool:
    """What the node window writes on a finished operation: complete at the last stage it ran."""
    if rec.state is not State.COMPLETE:
        return False
    if rec.action is None:
        return True
    return rec.stage in (C, P)


@st.composite
def recorded_and_desired(draw: st.DrawFn) -> tuple[PackageNodeState, PackageSpec]:
    action = draw(st.sampled_from(ACTIONS))
    stage = draw(st.sampled_from([A, U, C, INT, P]))
    state = draw(st.sampled_from(list(State)))
    target = draw(st.one_of(st.none(), st.sampled_from(RECORDED)))
    rec = entry(action, stage, state, draw(st.sampled_from(RECORDED)), target)
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra["interrupt"] = draw(st.sampled_from([{"type": "reboot"}, {"type": "noop"}]))
    patterns = draw(st.sampled_from([{}, {"b.conf": B_SERVICE}, {"*.conf": {"type": "reboot"}}]))
    desired = spec(draw(st.sampled_from(DESIRED)), configInterrupts=patterns, **extra)
    return rec, desired


@settings(max_examples=600, deadline=None)
@given(recorded_and_desired())
def test_a_desired_config_the_node_does_not_have_always_runs_the_config_stage(
    case: tuple[PackageNodeState, PackageSpec],
) -> None:
    rec, desired = case
    plan = plan_package("p", desired, rec, uninstall=False)
    wanted = config_hashes(desired.config)
    # What the node has: a finished operation's recorded hashes; an unfinished one's target.
    has = rec.config if finished(rec) else rec.target_config
    if has != wanted:
        assert C in plan.stages, (rec, desired.config, plan)
    if finished(rec) and rec.config != wanted:
        assert (plan.action, plan.resumed) == (PlanAction.CONFIG, False), plan


@settings(max_examples=400, deadline=None)
@given(recorded_and_desired())
def test_an_unfinished_operation_with_its_config_resumes_where_it_stopped(
    case: tuple[PackageNodeState, PackageSpec],
) -> None:
    rec, desired = case
    rec = rec.model_copy(update={"target_config": config_hashes(desired.config)})
    if finished(rec) or rec.action is None:
        return
    plan = plan_package("p", desired, rec, uninstall=False)
    full = stage_sequence(rec.action, plan.interrupt is not None)
    assert plan.action is rec.action and plan.resumed
    if rec.stage in full:
        where = full.index(rec.stage) + (1 if rec.state is State.COMPLETE else 0)
        assert plan.stages == full[where:], (rec, plan)
    else:
        assert plan.stages == full
