"""The per-node plan (planning/node/node_plan.py): actions, stage sequences, resumption, windows."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.enums import InterruptType, PlanAction, Stage, State
from api.interrupts import InterruptRequest, merge_interrupts
from api.node_state import NodeState, PackageNodeState, config_hashes
from api.package import PackageSpec
from planning.node.node_plan import NodePlanInput, plan_node, plan_package

A, U, C, INT, P, X = (
    Stage.APPLY,
    Stage.UPGRADE,
    Stage.CONFIG,
    Stage.INTERRUPT,
    Stage.POST_INTERRUPT,
    Stage.UNINSTALL,
)


def spec(version: str = "1.0.0", **extra: Any) -> PackageSpec:
    return PackageSpec.model_validate({"version": version, "image": f"x/p:{version}"} | extra)


def done(version: str = "1.0.0", **extra: Any) -> PackageNodeState:
    base: dict[str, Any] = {
        "version": version,
        "image": f"x/p:{version}",
        "stage": Stage.CONFIG,
        "state": State.COMPLETE,
    }
    return PackageNodeState.model_validate(base | extra)


REBOOT = {"interrupt": {"type": "reboot"}}


@pytest.mark.parametrize(
    ("desired", "recorded", "action", "stages"),
    [
        (spec(), None, PlanAction.INSTALL, (A, C)),
        (spec(**REBOOT), None, PlanAction.INSTALL, (A, C, INT, P)),
        (spec("1.1.0"), done(), PlanAction.UPGRADE, (U, C)),
        (spec("1.1.0", **REBOOT), done(), PlanAction.UPGRADE, (U, C, INT, P)),
        (spec("0.9.0", **REBOOT), done(), PlanAction.DOWNGRADE, (A, C, INT, P)),
        (spec(), done(), PlanAction.NONE, ()),
        (spec("1.0"), done("1.0.0", image="x/p:1.0"), PlanAction.NONE, ()),
        (spec(), done(version="garbage"), PlanAction.INSTALL, (A, C)),
    ],
)
def test_actions_and_stage_sequences(
    desired: PackageSpec, recorded: PackageNodeState | None, action: PlanAction, stages: tuple[Stage, ...]
) -> None:
    plan = plan_package("p", desired, recorded, uninstall=False)
    assert (plan.action, plan.stages) == (action, stages)


def test_every_stage_is_followed_by_its_check_and_the_interrupt_has_none() -> None:
    plan = plan_package("p", spec(**REBOOT), None, uninstall=False)
    assert [(s.mode, s.check) for s in plan.steps_before_interrupt()] == [
        ("apply", "apply-check"),
        ("config", "config-check"),
    ]
    assert [(s.mode, s.check) for s in plan.steps_after_interrupt()] == [
        ("post-interrupt", "post-interrupt-check")
    ]
    assert plan.needs_drain


def test_uninstall_by_spec_or_request() -> None:
    with_interrupt = spec(uninstall={"enabled": True, "apply": True}, **REBOOT)
    assert plan_package("p", with_interrupt, done(), uninstall=False).stages == (X, INT)
    assert plan_package("p", spec(), done(), uninstall=True).stages == (X,)
    absent = plan_package("p", with_interrupt, None, uninstall=False)
    assert absent.action is PlanAction.NONE and "not installed" in absent.reason


def test_config_only_change_runs_config_and_interrupts_of_changed_keys() -> None:
    desired = spec(
        config={"a.env": "2", "motd": "hi"},
        configInterrupts={"*.env": {"type": "service", "services": ["svc"]}, "motd": {"type": "noop"}},
        **REBOOT,
    )
    recorded = done(config=config_hashes({"a.env": "1", "motd": "hi"}), stage=Stage.POST_INTERRUPT)
    plan = plan_package("p", desired, recorded, uninstall=False)
    assert plan.action is PlanAction.CONFIG
    assert plan.changed_config == ("a.env",)
    # The package's own reboot does not fire on a config change; the matching config interrupt does.
    assert plan.interrupt == InterruptRequest(InterruptType.SERVICE, ("svc",))
    assert plan.stages == (C, INT, P)


def test_config_change_without_matching_interrupt_runs_config_only() -> None:
    desired = spec(
        config={"motd": "new", "x.env": "1"}, configInterrupts={"*.env": {"type": "reboot"}}, **REBOOT
    )
    recorded = done(config=config_hashes({"motd": "old", "x.env": "1"}))
    plan = plan_package("p", desired, recorded, uninstall=False)
    assert (plan.action, plan.stages, plan.interrupt) == (PlanAction.CONFIG, (C,), None)


def test_image_change_at_same_version_reinstalls() -> None:
    recorded = done(image="x/p:old-build")
    plan = plan_package("p", spec(), recorded, uninstall=False)
    assert plan.action is PlanAction.INSTALL and "image changed" in plan.reason


@pytest.mark.parametrize(
    ("action", "stage", "state", "remaining"),
    [
        (PlanAction.INSTALL, A, State.ERRORING, (A, C, INT, P)),
        (PlanAction.INSTALL, A, State.COMPLETE, (C, INT, P)),
        (PlanAction.INSTALL, C, State.IN_PROGRESS, (C, INT, P)),
        (PlanAction.INSTALL, INT, State.IN_PROGRESS, (INT, P)),
        (PlanAction.INSTALL, INT, State.COMPLETE, (P,)),
        (PlanAction.UPGRADE, U, State.ERRORING, (U, C, INT, P)),
        (PlanAction.INSTALL, P, State.COMPLETE, ()),
    ],
)
def test_unfinished_operations_resume_where_recorded(
    action: PlanAction, stage: Stage, state: State, remaining: tuple[Stage, ...]
) -> None:
    # The operation applies the desired config (targetConfig), so past `config` it is not re-run.
    recorded = done(stage=stage, state=state, action=action, target_config=config_hashes({}))
    plan = plan_package("p", spec(**REBOOT), recorded, uninstall=False)
    assert plan.stages == remaining
    if remaining:
        assert plan.resumed and plan.action is action


def test_recorded_without_action_resumes_by_stage() -> None:
    plan = plan_package("p", spec(), done(stage=U, state=State.ERRORING), uninstall=False)
    assert (plan.action, plan.stages) == (PlanAction.UPGRADE, (U, C))


def test_cancelled_uninstall_installs_again() -> None:
    recorded = done(stage=X, state=State.IN_PROGRESS, action=PlanAction.UNINSTALL)
    plan = plan_package("p", spec(uninstall={"enabled": True}), recorded, uninstall=False)
    assert plan.action is PlanAction.INSTALL and plan.stages == (A, C)


def node(
    desired: dict[str, PackageSpec],
    recorded: dict[str, PackageNodeState] | None = None,
    uninstall: frozenset[str] = frozenset(),
) -> NodePlanInput:
    return NodePlanInput(
        node="n1", recorded=NodeState(packages=recorded or {}), desired=desired, uninstall=uninstall
    )


def test_one_merged_interrupt_in_the_window() -> None:
    plan = plan_node(
        node(
            {
                "a": spec(interrupt={"type": "service", "services": ["cron"]}),
                "b": spec(interrupt={"type": "service", "services": ["containerd"]}),
                "c": spec(),
            }
        )
    )
    window = plan.window
    assert window is not None and window.packages == ("a", "b", "c")
    assert window.interrupt == InterruptRequest(InterruptType.SERVICE, ("containerd", "cron"))
    assert window.needs_drain and plan.needs_drain


def test_noop_interrupt_needs_no_drain() -> None:
    plan = plan_node(node({"a": spec(interrupt={"type": "noop"})}))
    assert plan.window is not None
    assert plan.window.interrupt == InterruptRequest(InterruptType.NOOP) and not plan.needs_drain


def test_a_dependent_of_an_interrupting_package_shares_its_window_after_it() -> None:
    plan = plan_node(
        node(
            {
                "driver": spec(**REBOOT),
                "toolkit": spec(dependsOn={"driver": "1.0.0"}),
                "sysctl": spec(),
                "after-sysctl": spec(dependsOn={"sysctl": "1.0.0"}),
            }
        )
    )
    # One drain and one merged interrupt for the whole change set (ADR 0007), dependents after dependencies.
    assert plan.window is not None and plan.window.needs_drain
    order = plan.order
    assert sorted(order) == ["after-sysctl", "driver", "sysctl", "toolkit"]
    assert order.index("driver") < order.index("toolkit") and order.index("sysctl") < order.index("after-sysctl")


def test_dependency_already_installed_is_satisfied() -> None:
    plan = plan_node(node({"base": spec(), "top": spec(dependsOn={"base": "1.0.0"})}, {"base": done()}))
    assert plan.order == ("top",)


@pytest.mark.parametrize(
    ("recorded", "desired_base", "reason"),
    [
        (None, None, "not installed on this node"),
        ({"base": done("0.9.0")}, None, "but 0.9.0 is installed"),
        (None, spec("2.0.0"), "but 2.0.0 is being installed"),
    ],
)
def test_unsatisfied_dependency_blocks_the_dependent(
    recorded: dict[str, PackageNodeState] | None, desired_base: PackageSpec | None, reason: str
) -> None:
    desired = {"top": spec(dependsOn={"base": "1.0.0"})}
    if desired_base is not None:
        desired["base"] = desired_base
    plan = plan_node(node(desired, recorded))
    assert "top" not in plan.order
    assert reason in plan.blocked["top"]


def test_uninstalls_go_first_dependents_before_dependencies() -> None:
    plan = plan_node(
        node(
            {"base": spec(), "top": spec(dependsOn={"base": "1.0.0"}), "new": spec()},
            {"base": done(), "top": done()},
            uninstall=frozenset({"base", "top"}),
        )
    )
    assert plan.window is not None and plan.window.packages == ("top", "base", "new")


def test_cycle_is_reported_not_raised() -> None:
    plan = plan_node(node({"a": spec(dependsOn={"b": "1.0.0"}), "b": spec(dependsOn={"a": "1.0.0"})}))
    assert plan.window is None
    assert plan.error is not None and "a -> b -> a" in plan.error


def test_nothing_to_do() -> None:
    plan = plan_node(node({"a": spec()}, {"a": done()}))
    assert plan.window is None and plan.packages["a"].action is PlanAction.NONE


# ---- property: windows over random packages and recorded states -------------------------------

NAMES = ["a", "b", "c", "d", "e", "f"]
INTERRUPTS = [None, {"type": "noop"}, {"type": "service", "services": ["s1"]}, {"type": "reboot"}]


@st.composite
def node_inputs(draw: st.DrawFn) -> NodePlanInput:
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    names = [n for n in NAMES if rng.random() < 0.7]
    desired: dict[str, PackageSpec] = {}
    recorded: dict[str, PackageNodeState] = {}
    for index, name in enumerate(names):
        # Dependencies only on earlier names: no cycles (cycles are tested separately).
        deps = {d: "1.0.0" for d in names[:index] if rng.random() < 0.3}
        interrupt = rng.choice(INTERRUPTS)
        desired[name] = spec("1.0.0", dependsOn=deps, **({"interrupt": interrupt} if interrupt else {}))
        roll = rng.random()
        if roll < 0.3:
            recorded[name] = done(
                "1.0.0", image="x/p:1.0.0", stage=Stage.POST_INTERRUPT if interrupt else Stage.CONFIG
            )
        elif roll < 0.5:
            recorded[name] = done("0.9.0")
        elif roll < 0.6:
            recorded[name] = done(
                stage=rng.choice([A, C, INT]), state=State.ERRORING, action=PlanAction.INSTALL
            )
    uninstall = frozenset(n for n in names if n in recorded and rng.random() < 0.1)
    return node(desired, recorded, uninstall)


@settings(max_examples=500, deadline=None)
@given(node_inputs())
def test_the_window_respects_dependencies_and_merges_interrupts(data: NodePlanInput) -> None:
    plan = plan_node(data)
    assert plan.error is None
    placed = {name: i for i, name in enumerate(plan.order)}
    working = {n for n, p in plan.packages.items() if p.has_work}
    assert set(placed) == working and len(plan.order) == len(working), (
        "each package with work runs exactly once"
    )
    for name in working:
        if plan.packages[name].action is PlanAction.UNINSTALL:
            continue
        for dep in data.desired[name].depends_on:
            if dep in working and plan.packages[dep].action is not PlanAction.UNINSTALL:
                assert placed[dep] < placed[name], "a dependency runs before its dependent"
    window = plan.window
    assert (window is None) == (not working)
    if window is not None:
        wanted = [plan.packages[n].interrupt for n in window.packages if plan.packages[n].needs_interrupt]
        assert window.interrupt == merge_interrupts(wanted)
        assert window.needs_drain == bool(window.interrupt and window.interrupt.disruptive)


def test_uninstall_under_way_continues_where_it_stopped() -> None:
    requested = spec(uninstall={"enabled": True, "apply": True}, **REBOOT)
    mid = done(stage=X, state=State.COMPLETE, action=PlanAction.UNINSTALL)
    assert plan_package("p", requested, mid, uninstall=False).stages == (INT,)
    finished = done(stage=INT, state=State.COMPLETE, action=PlanAction.UNINSTALL)
    assert plan_package("p", requested, finished, uninstall=False).action is PlanAction.NONE
    failed = done(stage=X, state=State.ERRORING, action=PlanAction.UNINSTALL)
    assert plan_package("p", requested, failed, uninstall=False).stages == (X, INT)


# --- canary rollback (planning/rollout/fleet_rollback.py): the previous spec over a failed new one ---------------


def failed(version: str, stage: Stage, action: PlanAction, **extra: Any) -> PackageNodeState:
    """What a window records when `stage` of `action` to `version` failed."""
    base: dict[str, Any] = {"version": version, "image": f"x/p:{version}", "stage": stage, "state": State.ERRORING,
                            "action": action, "lastError": "exit 7"}
    return PackageNodeState.model_validate(base | extra)


@pytest.mark.parametrize(
    ("previous", "recorded", "action", "stages"),
    [
        # The upgrade failed at its first stage: the previous version is installed fresh from apply.
        (spec("1.0.0"), failed("2.0.0", U, PlanAction.UPGRADE), PlanAction.DOWNGRADE, (A, C)),
        # ... or at its check, or after its interrupt: the same, with the previous interrupt.
        (spec("1.0.0", **REBOOT), failed("2.0.0", C, PlanAction.UPGRADE), PlanAction.DOWNGRADE, (A, C, INT, P)),
        (spec("1.0.0", **REBOOT), failed("2.0.0", P, PlanAction.UPGRADE), PlanAction.DOWNGRADE, (A, C, INT, P)),
        # A downgrade that failed is rolled back by installing the newer previous version.
        (spec("2.0.0"), failed("1.0.0", A, PlanAction.DOWNGRADE), PlanAction.UPGRADE, (U, C)),
        # Same version, rebuilt image that failed: the previous image is applied again.
        (spec("1.0.0"), failed("1.0.0", A, PlanAction.INSTALL, image="x/p:rebuilt"), PlanAction.INSTALL, (A, C)),
    ],
)
def test_rollback_over_an_erroring_entry(
    previous: PackageSpec, recorded: PackageNodeState, action: PlanAction, stages: tuple[Stage, ...]
) -> None:
    plan = plan_package("p", previous, recorded, uninstall=False)
    assert (plan.action, plan.stages) == (action, stages)
    assert plan.previous_version == recorded.version


def test_rollback_of_a_new_package_that_failed_uninstalls_it() -> None:
    new = spec("1.0.0", **REBOOT)
    plan = plan_package("p", new, failed("1.0.0", A, PlanAction.INSTALL), uninstall=True)
    assert (plan.action, plan.stages) == (PlanAction.UNINSTALL, (X, INT))
    never_ran = plan_package("p", new, None, uninstall=True)
    assert never_ran.action is PlanAction.NONE and not never_ran.has_work


def test_rollback_of_a_config_change_that_failed_reapplies_the_previous_config() -> None:
    before, after = {"a.conf": "one"}, {"a.conf": "two"}
    recorded = failed("1.0.0", C, PlanAction.CONFIG, config=config_hashes(before), targetConfig=config_hashes(after))
    plan = plan_package("p", spec("1.0.0", config=before), recorded, uninstall=False)
    assert (plan.action, plan.stages, plan.changed_config) == (PlanAction.CONFIG, (C,), ("a.conf",))


def test_rollback_window_uninstalls_first_then_downgrades_in_one_window() -> None:
    recorded = NodeState(packages={"old": failed("2.0.0", U, PlanAction.UPGRADE),
                                   "new": failed("1.0.0", C, PlanAction.INSTALL)})
    plan = plan_node(NodePlanInput(node="n", recorded=recorded,
                                   desired={"old": spec("1.0.0", **REBOOT), "new": spec("1.0.0", **REBOOT)},
                                   uninstall=frozenset({"new"})))
    assert plan.window is not None and plan.window.packages == ("new", "old")
    assert plan.window.interrupt == InterruptRequest(type=InterruptType.REBOOT) and plan.needs_drain
