"""The rollback of a failed canary (`canary.onFailure: rollback`) on the time-skipping server, with the
fake listing and node workflows of `fleet_fakes` (a version listed in `fail_versions` fails on every node).

Covers: the canary node gets ONE rollback window (the previous version of the changed Package, the
uninstall of the new one) and no other node gets a window of the failed wave; the same desired state
sent again changes nothing; a fixed spec starts a new wave, canary first; a policy edit after the
rollback runs the canary again; a rollback that fails halts with both reasons and `retry` repeats it;
`resume` re-attempts the wave; the default (`halt`) sends no rollback window; the rollback goes out
while the fleet is paused and outside its maintenance windows; setting the previous spec back
completes the fleet without a window.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from api.enums import CanaryPhase, RolloutPhase
from api.policy import DeploymentPolicySpec
from planning.fleet.codec import state_to_json
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_targets import FleetSelection, NodeTargets
from protocol import names
from protocol.fleet import FleetSpec
from tests.helpers import assert_eventually_async, unique_name
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.skipping import skip
from tests.workflows.test_fleet import fleet, package, policy, progress, settled
from tests.workflows.test_fleet_holds import details, whole_minute, window

ROLLBACK = {"count": 1, "onFailure": "rollback"}
FIXED = {"type": "fixed", "initialBatch": 2}


def orders(nodes: FakeNodes, node: str) -> list[list[tuple[str, str, bool]]]:
    """Per request `node` got: (Package, version, uninstall) of each order."""
    return [[(o.name, str(o.spec["version"]), o.uninstall) for o in r.packages] for n, r in nodes.requests if n == node]


async def test_failed_canary_goes_back_and_the_rest_is_untouched(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(6)
    name = unique_name("rb")
    pol = policy(FIXED, budget=2, canary=ROLLBACK)
    async with fleet(temporal_test_env, nodes, FleetSpec(name, pol, 1, [package("a")])) as handle:
        await settled(handle)
        nodes.fail_versions.add("2.0.0")
        bad = FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2), package("b")])
        await handle.signal(names.SIGNAL_FLEET_SPEC, bad)
        report = await settled(handle, RolloutPhase.ROLLED_BACK, wave=2)
        [canary] = report.canary_nodes
        assert report.canary_phase is CanaryPhase.FAILED
        # One window of the failed wave, then ONE rollback window: a back to 1.0.0, b uninstalled.
        assert orders(nodes, canary)[1:] == [[("a", "2.0.0", False), ("b", "1.0.0", False)],
                                             [("a", "1.0.0", False), ("b", "1.0.0", True)]]
        assert all(len(orders(nodes, n)) == 1 for n in nodes.nodes if n != canary), "others untouched"
        assert nodes.nodes[canary].recorded == {"a": ("1.0.0", {})}
        assert report.rollback is not None and report.rollback.nodes == [canary]
        assert report.rollback.versions == {"a": "1.0.0"} and report.rollback.uninstalled == ["b"]
        assert report.rollback.reason == f"canary failed on {canary} (a: apply failed: exit 7)"
        assert report.packages["a"].phase is RolloutPhase.ROLLED_BACK
        assert report.message.startswith("wave 2 rolled back: canary failed on")
        assert (await details(handle)).startswith(f"**RolledBack** fleet/{name} wave 2")
        assert (await details(handle)).endswith(f"; {report.rollback.reason}")
        sent = len(nodes.requests)

        await handle.signal(names.SIGNAL_FLEET_SPEC, bad)  # the bridge resends: nothing happens
        await skip(temporal_test_env, 60, handle)
        assert len(nodes.requests) == sent and (await progress(handle)).phase is RolloutPhase.ROLLED_BACK

        nodes.fail_versions.clear()
        fixed = FleetSpec(name, pol, 1, [package("a", "2.0.1", generation=3), package("b")])
        await handle.signal(names.SIGNAL_FLEET_SPEC, fixed)
        report = await settled(handle, wave=3)
        assert report.rollback is None and report.canary_phase is CanaryPhase.PASSED
        assert nodes.requests[sent][0] == canary, "the new wave starts with its canary"
        assert all(n.recorded["a"][0] == "2.0.1" and "b" in n.recorded for n in nodes.nodes.values())


async def test_a_policy_edit_after_a_rollback_runs_the_canary_again(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(4)
    name = unique_name("rbp")
    pol = policy(FIXED, budget=2, canary=ROLLBACK)
    async with fleet(temporal_test_env, nodes, FleetSpec(name, pol, 1, [package("a")])) as handle:
        await settled(handle)
        nodes.fail_versions.add("2.0.0")
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2)]))
        await settled(handle, RolloutPhase.ROLLED_BACK, wave=2)
        sent = len(nodes.requests)
        edited = policy(FIXED, budget=3, canary=ROLLBACK)
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, edited, 2, [package("a", "2.0.0", generation=2)]))
        report = await settled(handle, RolloutPhase.ROLLED_BACK, wave=3)
        # The canary again (one window of 2.0.0 and its rollback), not 2.0.0 everywhere without one.
        assert [[(o.name, o.spec["version"]) for o in r.packages] for _, r in nodes.requests[sent:]] == [
            [("a", "2.0.0")], [("a", "1.0.0")]]
        assert report.rollback is not None and report.rollback.wave == 3


async def test_a_failed_rollback_halts_with_both_reasons_and_retry_repeats_it(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    nodes = FakeNodes.of(4)
    name = unique_name("rbf")
    pol = policy(FIXED, budget=2, canary=ROLLBACK)
    async with fleet(temporal_test_env, nodes, FleetSpec(name, pol, 1, [package("a")])) as handle:
        await settled(handle)
        nodes.fail_versions.update({"2.0.0", "1.0.0"})  # the rollback to 1.0.0 fails too
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2)]))
        report = await settled(handle, RolloutPhase.HALTED, wave=2)
        [canary] = report.canary_nodes
        assert report.message.startswith(f"halted: rollback of wave 2 failed on {canary} (a: apply failed: exit 7), "
                                         f"after: canary failed on {canary} (a: apply failed: exit 7)")
        assert report.packages["a"].erroring == {canary: "rollback failed: a: apply failed: exit 7"}
        assert report.rollback is not None and report.rollback.phase is RolloutPhase.HALTED
        nodes.fail_versions.discard("1.0.0")
        await handle.signal(names.SIGNAL_RETRY)
        report = await settled(handle, RolloutPhase.ROLLED_BACK, wave=2)
        assert [o[0][1] for o in orders(nodes, canary)] == ["1.0.0", "2.0.0", "1.0.0", "1.0.0"]
        assert all(len(orders(nodes, n)) == 1 for n in nodes.nodes if n != canary)


async def test_resume_reattempts_the_wave(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(4)
    name = unique_name("rbr")
    pol = policy(FIXED, budget=2, canary=ROLLBACK)
    async with fleet(temporal_test_env, nodes, FleetSpec(name, pol, 1, [package("a")])) as handle:
        await settled(handle)
        nodes.fail_versions.add("2.0.0")
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2)]))
        await settled(handle, RolloutPhase.ROLLED_BACK, wave=2)
        await handle.signal(names.SIGNAL_RETRY)  # nothing failed in the rollback: nothing to retry
        await skip(temporal_test_env, 30, handle)
        assert (await progress(handle)).phase is RolloutPhase.ROLLED_BACK
        nodes.fail_versions.clear()  # e.g. the host problem was fixed
        await handle.signal(names.SIGNAL_RESUME)
        report = await settled(handle, wave=3)
        assert report.canary_phase is CanaryPhase.PASSED
        assert all(n.recorded["a"][0] == "2.0.0" for n in nodes.nodes.values())


async def test_the_default_halts_without_a_rollback_window(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(4)
    name = unique_name("rbh")
    pol = policy(FIXED, budget=2, canary={"count": 1})
    async with fleet(temporal_test_env, nodes, FleetSpec(name, pol, 1, [package("a")])) as handle:
        await settled(handle)
        nodes.fail_versions.add("2.0.0")
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2)]))

        async def halted() -> bool:
            report = await progress(handle)
            assert report.phase is RolloutPhase.HALTED and report.wave == 2, report.phase
            return True

        await assert_eventually_async(halted, timeout=60)
        assert len(nodes.requests) == 5 and (await progress(handle)).rollback is None


async def test_the_rollback_goes_out_while_paused_and_outside_the_maintenance_windows(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    env = temporal_test_env
    start = whole_minute(await env.get_current_time()) - timedelta(minutes=1)
    nodes = FakeNodes.of(4)
    name = unique_name("rbw")
    pol = policy(FIXED, budget=2, canary=ROLLBACK) | {"maintenanceWindows": [window(start, 31)]}
    async with fleet(env, nodes, FleetSpec(name, pol, 1, [package("a")])) as handle:
        await settled(handle)
        nodes.auto = False
        nodes.fail_versions.add("2.0.0")
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2)]))

        async def canary_out() -> str:
            assert len(nodes.outstanding) == 1, nodes.outstanding
            return next(iter(nodes.outstanding))

        canary = await assert_eventually_async(canary_out)
        await handle.signal(names.SIGNAL_PAUSE)
        await skip(env, timedelta(minutes=45), handle)  # the maintenance window closed
        await nodes.finish(env.client)  # the canary's window ran anyway and failed

        async def rolling_back() -> bool:
            report = await progress(handle)
            assert report.phase is RolloutPhase.ROLLING_BACK, (report.phase, report.message)
            assert [o.spec["version"] for o in nodes.outstanding[canary].packages] == ["1.0.0"]
            return True

        await assert_eventually_async(rolling_back)
        await nodes.finish(env.client)
        await settled(handle, RolloutPhase.ROLLED_BACK, wave=2)
        assert nodes.nodes[canary].recorded["a"][0] == "1.0.0"


async def test_setting_the_previous_spec_back_completes_without_a_window(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(4)
    name = unique_name("rbs")
    pol = policy(FIXED, budget=2, canary=ROLLBACK)
    async with fleet(temporal_test_env, nodes, FleetSpec(name, pol, 1, [package("a")])) as handle:
        await settled(handle)
        nodes.fail_versions.add("2.0.0")
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2)]))
        await settled(handle, RolloutPhase.ROLLED_BACK, wave=2)
        sent = len(nodes.requests)
        await handle.signal(names.SIGNAL_FLEET_SPEC, FleetSpec(name, pol, 1, [package("a", generation=3)]))
        report = await settled(handle, wave=3)
        assert len(nodes.requests) == sent and report.packages["a"].counts == {"complete": 4}


async def test_without_a_known_previous_spec_the_canary_halts_and_says_why(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    """A fleet carried over from a release that kept no previous specs, in the middle of its wave."""
    nodes = FakeNodes.of(3, fail_versions={"2.0.0"})
    for node in nodes.nodes.values():
        node.recorded["a"] = ("1.0.0", {})
    name = unique_name("rbu")
    pol = policy(FIXED, budget=2, canary=ROLLBACK)
    spec = FleetSpec(name, pol, 1, [package("a", "2.0.0", generation=2)])
    state = fs.FleetState()
    fs.set_spec(state, spec)
    fs.start_wave(state, FleetSelection({n: NodeTargets(pending=["a"]) for n in nodes.nodes}),
                  DeploymentPolicySpec.model_validate(pol), names.fleet_workflow_id(name))
    state.previous = {}  # the old release kept no previous specs
    async with fleet(temporal_test_env, nodes, spec, carry=state_to_json(state)) as handle:
        report = await settled(handle, RolloutPhase.HALTED)
        assert report.message.startswith(f"halted: canary failed on {report.canary_nodes[0]}; not rolled back: "
                                         "the spec before wave 1 of a is unknown")
        assert report.wave == 1 and report.rollback is None and len(nodes.requests) == 1
