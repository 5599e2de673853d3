"""One pod per window phase (issue #26 item 1, ADR 0016), on the time-skipping server with fake
activities: a window runs every Package's stages before the interrupt in ONE pod, the merged
interrupt in a pod of its own and every Package's stages after it in one pod; a failed stage or
check is retried from that stage in a new pod with the Packages after it (the Packages before it
are done, its attempts counted on their own); a Package whose dependency ran out of attempts is
skipped, an independent one still runs; the window's stage pods are deleted once its outcome is
written, but the latest failed one of an erroring package. (The pods of the releases before, a pod
per Package and phase with the interrupt carried by the last, replay from tests/histories/node.)"""

from __future__ import annotations

import uuid

import pytest
from temporalio.testing import WorkflowEnvironment

from api.node_state import parse_node_state
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import a_spec, harness, order

pytestmark = pytest.mark.workflows
REBOOT = {"type": "reboot"}
BEFORE = ["apply", "apply-check", "config", "config-check"]
AFTER = ["post-interrupt", "post-interrupt-check"]


def node(**exits: list[int]) -> FakeNode:
    """A node whose modes exit as scripted: `config_check=[4, 0]`, or `a__config_check` for Package a's."""
    return FakeNode(name=f"node-{uuid.uuid4().hex[:8]}",
                    exits={k.replace("__", ":").replace("_", "-"): v for k, v in exits.items()})


def shape(h: object) -> list[list[tuple[str, list[str], str, int]]]:
    """Every pod as its Packages' (package, modes, first mode, attempt); an interrupt pod's modes are []."""
    return [[(j.package, list(j.modes), j.mode, j.attempt) for j in pod] for pod in h.node.pods()]  # type: ignore[attr-defined]


async def test_a_failed_check_is_retried_from_its_stage_in_a_new_pod(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node(config_check=[4, 0])) as h:
        await h.request("kernel", a_spec(interrupt=REBOOT))
        [result] = await h.results(1)
        assert result.state == "complete"
        # apply is not run again: the retry starts at config (its attempt 2); the reboot has its own pod.
        assert shape(h) == [[("kernel", BEFORE, "apply", 1)], [("kernel", ["config", "config-check"], "config", 2)],
                            [("kernel", [], "interrupt", 1)], [("kernel", AFTER, "post-interrupt", 1)]]
        assert h.node.modes() == [*BEFORE, "config", "config-check", "interrupt:reboot", *AFTER]
        assert h.node.cleanups == [(["kernel"], [])]  # every pod deleted: the package completed


async def test_a_stage_out_of_attempts_names_the_mode_and_keeps_its_last_job(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env, node(config_check=[4, 4, 4])) as h:
        await h.request("kernel", a_spec(interrupt=REBOOT))
        [result] = await h.results(1)
        assert (result.state, result.stage) == ("erroring", "config")
        assert result.message.startswith("config-check failed after 3 attempts (exit code 4)")
        assert [j.modes for j in h.node.stage_jobs()] == [BEFORE] + [["config", "config-check"]] * 2
        assert not any(m.startswith("interrupt") for m in h.node.modes()), "the reboot never ran"
        state, _ = parse_node_state(h.node.state_annotation)
        entry = state.packages["kernel"]
        assert (entry.stage, entry.state, entry.attempts) == ("config", "erroring", 3)
        # The latest failed attempt stays for `noderoll logs`; the earlier ones go.
        assert h.node.cleanups == [(["kernel"], [h.node.jobs[-1]])]


async def test_a_failed_interrupt_is_retried_in_its_own_pod(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node(interrupt=[1, 0])) as h:
        await h.request("kernel", a_spec(interrupt=REBOOT))
        [result] = await h.results(1)
        assert result.state == "complete"
        names = [n for n in h.node.names() if n in ("run_stage_pod", "run_interrupt")]
        assert names == ["run_stage_pod", "run_interrupt", "run_interrupt", "run_stage_pod"]
        retried = [arg for name, arg in h.node.calls if name == "run_interrupt"][-1]
        assert retried.job.attempt == 2 and retried.job.interrupt == {"type": "reboot", "services": []}
        assert not any(arg.job.interrupt for name, arg in h.node.calls if name == "run_stage_pod")
        state, _ = parse_node_state(h.node.state_annotation)
        assert (state.packages["kernel"].stage, state.packages["kernel"].state) == ("post-interrupt", "complete")


async def test_two_reboot_packages_three_pods_one_reboot(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.window(order("a", interrupt=REBOOT), order("b", interrupt=REBOOT, dependsOn={"a": "1.0.0"}))
        [result] = await h.windows(1)
        assert {p: o.state for p, o in result.outcomes.items()} == {"a": "complete", "b": "complete"}
        # Before: 4 pods (a pod per Package and phase, the reboot carried by b's first).
        assert shape(h) == [[("a", BEFORE, "apply", 1), ("b", BEFORE, "apply", 1)],
                            [("a", [], "interrupt", 1)],
                            [("a", AFTER, "post-interrupt", 1), ("b", AFTER, "post-interrupt", 1)]]
        assert h.node.modes().count("interrupt:reboot") == 1
        assert h.node.cleanups == [(["a", "b"], [])]


async def test_a_retry_starts_at_the_failed_stage_with_the_packages_after_it(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env, node(b__config_check=[3, 0])) as h:
        await h.window(order("a", interrupt=REBOOT), order("b", interrupt=REBOOT, dependsOn={"a": "1.0.0"}),
                       order("c", interrupt=REBOOT, dependsOn={"b": "1.0.0"}))
        [result] = await h.windows(1)
        assert {p: o.state for p, o in result.outcomes.items()} == {"a": "complete", "b": "complete", "c": "complete"}
        # a is done and does not run again; b resumes at config (attempt 2), c (never reached) runs whole.
        assert shape(h)[:2] == [
            [("a", BEFORE, "apply", 1), ("b", BEFORE, "apply", 1), ("c", BEFORE, "apply", 1)],
            [("b", ["config", "config-check"], "config", 2), ("c", BEFORE, "apply", 1)]]
        assert [[j.package for j in pod] for pod in h.node.pods()[2:]] == [["a"], ["a", "b", "c"]]
        assert h.node.modes().count("interrupt:reboot") == 1


async def test_a_package_out_of_attempts_skips_its_dependents_not_the_others(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env, node(a__apply=[2, 2, 2])) as h:
        # The window's order is a, c, b (dependency levels): a fails first, so c and b never run with it.
        await h.window(order("a", interrupt=REBOOT), order("b", interrupt=REBOOT, dependsOn={"a": "1.0.0"}),
                       order("c", interrupt=REBOOT))
        [result] = await h.windows(1)
        states = {p: o.state for p, o in result.outcomes.items()}
        assert states == {"a": "erroring", "b": "blocked", "c": "complete"}
        assert "dependency a failed" in result.outcomes["b"].message
        assert [[j.package for j in pod] for pod in h.node.pods()] == [
            ["a", "c", "b"], ["a", "c", "b"], ["a", "c", "b"], ["c"], ["c"], ["c"]]
        # c's pods after a gave up: its stages alone, then the reboot for c alone, then its post-interrupt.
        assert [j.mode for j in h.node.pods()[3]] == ["apply"] and h.node.pods()[4][0].mode == "interrupt"
        assert h.node.modes().count("interrupt:reboot") == 1
        state, _ = parse_node_state(h.node.state_annotation)
        assert "b" not in state.packages, "a skipped Package keeps the record it had (none)"
        assert (state.packages["a"].stage, state.packages["a"].state, state.packages["a"].attempts) == (
            "apply", "erroring", 3)


async def test_the_pods_carry_each_packages_uid_and_generation_from_the_fleets_order(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    from protocol.fleet import PackageOrder

    async with harness(temporal_test_env) as h:
        await h.window(PackageOrder("a", a_spec(interrupt=REBOOT), 4, uid="uid-a"), order("b", interrupt=REBOOT))
        await h.windows(1)
        jobs = [j for pod in h.node.pods() for j in pod]
        assert {(j.package, j.package_uid, j.generation) for j in jobs if j.package == "a"} == {("a", "uid-a", 4)}
        # An order without a uid (recorded before, a rollback's): the activity reads the Package.
        assert {(j.package_uid, j.generation) for j in jobs if j.package == "b"} == {("", 0)}
