"""Fleet rollouts on the real stack: `noderoll worker` and `noderoll bridge` processes, fleetsim nodes.

* Three Packages applied at once under one DeploymentPolicy (canary, exponential, budget 3): two
  reboot Packages (one depends on the other) and a `service` Package. Every node is cordoned once
  and rebooted once (a Node watch counts cordon transitions and boot-id changes), records ONE
  interrupt on its host (the service restart folded into the reboot), the budget is never exceeded, and
  `NoderollPackage = '<pkg>'` finds the fleet and the node windows in Temporal's visibility.
* A Package added while the fleet is mid-batch: nodes not yet reached get both in one window; nodes
  already done get exactly one more window.
* Pausing one Package (annotation) leaves the other rolling; halt and resume of the fleet; retry of
  one node after a stage failure.
* A dependency paused by the `pause` signal keeps its dependent out of the windows: after `resume`
  both go in ONE window per node (one cordon, one reboot).
* A node relabelled out of the selector before its batch gets no window and is named in the
  Package's status message.
* The fleet's history and a node's fleet window replay against the worker's workflows (recorded into
  tests/histories with `NODEROLL_RECORD_FLEET_HISTORIES=tests/histories`).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

from api import keys
from api.enums import RolloutPhase
from fleetsim.faults import Fault
from fleetsim.fleet import Fleet
from localstack.state import StackInfo
from planning.views.fleet_status import FleetProgress
from protocol import names
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.histories import completed_history, replay_and_record
from tests.helpers.nodewatch import watching_nodes
from tests.helpers.packages import (
    BENCH_PACKAGES,
    KMOD_IMAGE,
    SERVICE_IMAGE,
    SLEEP_IMAGE,
    package_spec,
)
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
    kubectl_wait_ready,
    patch_package,
    read_package,
    temporal_signal,
    windows_of,
)

pytestmark = pytest.mark.integration
ROLLOUT_TIMEOUT = 420.0


run = noderoll_fixture(retry_backoff_seconds=1)


def interrupts_on(fleet: Fleet, node: str) -> list[str]:
    """The interrupts the agent recorded on `node`'s host (its `interrupts.log`; the stage pods that
    ran them are deleted after their window, issue #14)."""
    log = fleet.sandbox(node) / "var" / "lib" / "noderoll" / "interrupts.log"
    return log.read_text().splitlines() if log.exists() else []


async def test_change_set_costs_one_cordon_one_reboot_one_interrupt_per_node(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"fleet-test": unique_name("cs")}
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    policy, kernel, driver, tuned = unique_name("pol"), unique_name("kernel"), unique_name("driver"), unique_name("tuned")
    budget = 3
    with running_fleet(local_stack, nodes=12, labels=labels) as fleet, watching_nodes(kube_api_client, selector) as seen:
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1, "soakSeconds": 2, "promotion": "auto"},
                "default": {"budget": {"count": budget},
                            "strategy": {"type": "exponential", "initialBatch": 1, "growthFactor": 2}},
            })
            reboot = {"type": "reboot"}
            create_package(kube_api_client, run.package(kernel, package_spec(
                policy=policy, labels=labels, interrupt=reboot)))
            create_package(kube_api_client, run.package(driver, package_spec(
                KMOD_IMAGE, policy=policy, labels=labels, interrupt=reboot, dependsOn={kernel: "1.0.0"})))
            create_package(kube_api_client, run.package(tuned, package_spec(
                SERVICE_IMAGE, policy=policy, labels=labels,
                interrupt={"type": "service", "services": ["containerd"]})))
            for name in (kernel, driver, tuned):
                kubectl_wait_ready(local_stack, name)
            report = await fleet_progress(temporal_client, policy)
            for node in fleet.node_names:
                assert seen.cordons.get(node) == 1, (node, seen.cordons)
                assert seen.reboots(node) == 1, (node, seen.boot_ids.get(node))
                assert len(interrupts_on(fleet, node)) == 1, (node, interrupts_on(fleet, node))
                assert windows_of(kube_api_client, node).count == 1, (node, windows_of(kube_api_client, node))
                progress = report.nodes[node]
                assert (progress.windows, progress.drains, progress.interrupts) == (1, 1, 1), (node, progress)
            assert 1 <= seen.peak <= budget, f"{seen.peak} nodes cordoned at once; budget {budget}"
            assert report.wave == 1 and report.canary_phase.value == "Passed"
            for name in (kernel, driver, tuned):
                status = read_package(kube_api_client, name)["status"]
                assert status["phase"] == "Complete" and status["progress"] == "12/12", status

            def policy_complete() -> dict:
                status = client.CustomObjectsApi(kube_api_client).get_cluster_custom_object(
                    keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, policy)["status"]
                assert status["phase"] == "Complete" and status["wave"] == 1, status
                return status

            # A Package is Complete once its nodes are; the fleet (the policy's phase) once its loop found no
            # batch left, which may wait for a re-list first (the listing gap): seen seconds after the Packages.
            policy_status = assert_eventually(policy_complete, timeout=60)
            assert sorted(policy_status["packages"]) == sorted([kernel, driver, tuned])
            # Temporal UI: NoderollPackage = '<driver>' finds the fleet and the node windows that carried it.
            found = [w.id async for w in temporal_client.list_workflows(f"{names.SEARCH_ATTR_PACKAGE} = '{driver}'")]
            assert names.fleet_workflow_id(policy) in found
            assert {names.node_workflow_id(n) for n in fleet.node_names} <= set(found), found
        finally:
            for name in (tuned, driver, kernel):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


def carried(message: str) -> list[str]:
    """Package names of a `WindowStarted` message ("node window for a 1.0.0, b 1.0.0 (drain)")."""
    listed = message.removeprefix("node window for ").split(" (")[0]
    return sorted(part.split()[0] for part in listed.split(", "))


async def test_package_added_mid_batch_joins_windows_not_yet_started(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"fleet-test": unique_name("mid")}
    policy, first, second = unique_name("pol"), unique_name("slow"), unique_name("late")
    with running_fleet(local_stack, nodes=6, labels=labels, image_stores=[BENCH_PACKAGES]) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {
                "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
            slow = package_spec(SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=2)
            create_package(kube_api_client, run.package(first, slow))

            async def second_batch_out() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.batch_number >= 2 and report.counts.get("in_progress", 0) >= 1, report.counts
                return True

            await assert_eventually_async(second_batch_out, timeout=180)
            create_package(kube_api_client, run.package(second, package_spec(policy=policy, labels=labels)))
            kubectl_wait_ready(local_stack, first)
            kubectl_wait_ready(local_stack, second)
            # One window with both, or two: the first with `first` alone, the last with `second`.
            shapes = {node: windows_of(kube_api_client, node) for node in fleet.node_names}
            once = [n for n, w in shapes.items() if (w.count, carried(w.last)) == (1, sorted([first, second]))]
            twice = [n for n, w in shapes.items() if (w.count, carried(w.last)) == (2, [second])]
            assert sorted(once + twice) == sorted(fleet.node_names), shapes
            # Batches 1 and 2 (4 nodes) were reached before the second Package: one more window each.
            assert len(twice) >= 4 and once, shapes
            report = await fleet_progress(temporal_client, policy)
            assert report.wave == 2 and report.packages[second].counts == {"complete": 6}, report.packages[second]
        finally:
            for name in (first, second):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


async def test_pause_one_package_halt_resume_and_retry_one_node(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"fleet-test": unique_name("ctl")}
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    policy, kept, paused = unique_name("pol"), unique_name("kept"), unique_name("held")
    fleet_id = names.fleet_workflow_id(policy)
    with running_fleet(local_stack, nodes=4, labels=labels) as fleet:
        bad = fleet.node_names[0]
        fleet.options.faults.add(Fault("fail-stage", nodes=bad, mode="apply", package=kept, exit_code=7))
        try:
            create_policy(kube_api_client, run, policy, {
                "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
            create_package(kube_api_client, run.package(kept, package_spec(policy=policy, labels=labels)))
            create_package(kube_api_client, run.package(paused, package_spec(policy=policy, labels=labels),
                                                        annotations={keys.PAUSE_ANNOTATION: "true"}))

            async def kept_failed_on_one_node() -> FleetProgress:
                report = await fleet_progress(temporal_client, policy)
                assert report.packages[kept].phase is RolloutPhase.FAILED, report.packages[kept]
                return report

            report = await assert_eventually_async(kept_failed_on_one_node, timeout=240)
            assert list(report.packages[kept].erroring) == [bad]
            assert report.packages[kept].counts.get("complete") == 3
            assert report.packages[paused].phase is RolloutPhase.PAUSED
            records = {n.metadata.name: json.loads((n.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION, "{}"))
                       for n in client.CoreV1Api(kube_api_client).list_node(label_selector=selector).items}
            assert not any(paused in r.get("packages", {}) for r in records.values()), records

            # Halt the fleet (operator, Temporal CLI), un-pause the held Package: nothing starts while halted.
            temporal_signal(local_stack, fleet_id, names.SIGNAL_HALT)

            async def halted() -> bool:
                assert (await fleet_progress(temporal_client, policy)).phase is RolloutPhase.HALTED
                return True

            await assert_eventually_async(halted, timeout=60)
            patch_package(kube_api_client, paused, {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: None}}})

            async def resumed_package_waits() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.packages[paused].phase is RolloutPhase.HALTED, report.packages[paused]
                return True

            await assert_eventually_async(resumed_package_waits, timeout=60)
            temporal_signal(local_stack, fleet_id, names.SIGNAL_RESUME)
            kubectl_wait_ready(local_stack, paused, timeout=240)

            # Retry only the failed node once its fault is gone.
            fleet.options.faults.replace([])
            temporal_signal(local_stack, fleet_id, names.SIGNAL_RETRY, {"packages": [kept], "nodes": [bad]})
            kubectl_wait_ready(local_stack, kept, timeout=240)
            assert read_package(kube_api_client, kept)["status"]["progress"] == "4/4"
        finally:
            for name in (kept, paused):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


async def test_node_workflow_terminated_mid_window_is_noticed_and_asked_again(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"fleet-test": unique_name("lost")}
    policy, name = unique_name("pol"), unique_name("pkg")
    with running_fleet(local_stack, nodes=3, labels=labels, image_stores=[BENCH_PACKAGES]) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 1}}})
            create_package(kube_api_client, run.package(name, package_spec(
                SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=4)))

            async def first_in_window() -> str:
                report = await fleet_progress(temporal_client, policy)
                # In flight is not yet started: wait for the window's own Event (its stage takes 4 s), or the
                # termination may hit the node workflow before its window began (then it has only one).
                out = [n for n, p in report.nodes.items() if p.state == "in_progress" and windows_of(kube_api_client, n).count]
                assert out, report.counts
                return out[0]

            first = await assert_eventually_async(first_in_window, timeout=120)
            # Terminated from the Temporal UI/CLI in the middle of its window: it will never answer.
            await temporal_client.get_workflow_handle(names.node_workflow_id(first)).terminate("operator")
            kubectl_wait_ready(local_stack, name, timeout=300)
            windows = windows_of(kube_api_client, first)
            assert windows.count == 2, windows  # the terminated window, then the one asked again
            assert all(windows_of(kube_api_client, n).count == 1 for n in fleet.node_names if n != first)
            assert not client.CoreV1Api(kube_api_client).read_node(first).spec.unschedulable
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


# Set to a histories root (tests/histories) to save the histories below as <root>/<kind>/<name>.json
# for tests/workflows/test_replay.py. The names are new for each change recorded: files recorded
# before a change stay, so every path keeps a history (fleet-canary-then-batch-two-packages was recorded
# before `unproven-changes-count-again`; the fleet-window-* ones before the one-engine release, ADR 0013;
# fleet-canary-then-batch-one-engine, window-reboot-dependency and window-dependent-of-failed-skipped
# before issue #26: one pod per phase, the window's end in one activity, node runs started with their
# first request).
RECORD_FLEET_HISTORIES_ENV = "NODEROLL_RECORD_FLEET_HISTORIES"
RECORDED_AS = {
    "fleet": "fleet-canary-then-batch-window-cost",
    "node": "window-reboot-dependency-short-calls-local",
    "skip": "window-dependent-of-failed-skipped-short-calls-local",
}


async def test_fleet_and_node_window_histories_replay(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    """Three nodes, two Packages (a reboot one depending on the other), a canary: the fleet's history (to
    its end, once its Packages are gone) and a node's fleet window replay against the worker's workflows."""
    labels = {"fleet-test": unique_name("rec")}
    policy, base, driver = unique_name("pol"), unique_name("base"), unique_name("driver")
    fleet_id = names.fleet_workflow_id(policy)
    with running_fleet(local_stack, nodes=3, labels=labels) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1, "soakSeconds": 1, "promotion": "auto"},
                "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
            create_package(kube_api_client, run.package(base, package_spec(policy=policy, labels=labels)))
            create_package(kube_api_client, run.package(driver, package_spec(
                KMOD_IMAGE, policy=policy, labels=labels, interrupt={"type": "reboot"},
                dependsOn={base: "1.0.0"})))
            for name in (base, driver):
                kubectl_wait_ready(local_stack, name)
            node = fleet.node_names[0]
            windows = windows_of(kube_api_client, node)
            assert (windows.count, carried(windows.last)) == (1, sorted([base, driver])), windows
        finally:
            for name in (driver, base):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)

        histories = {
            f"fleet/{RECORDED_AS['fleet']}": await completed_history(temporal_client, fleet_id),
            f"node/{RECORDED_AS['node']}": await temporal_client.get_workflow_handle(
                names.node_workflow_id(node)).fetch_history(),
        }
    await replay_and_record(histories, RECORD_FLEET_HISTORIES_ENV)


async def test_a_node_relabelled_out_before_its_batch_is_named_in_the_package_status(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    """Regression: a node that left the selector before its batch was dropped from the fleet's progress
    without a word; the Package's status now names it (as docs/how-it-works.md promises), and it gets no window."""
    labels = {"fleet-test": unique_name("left")}
    policy, name = unique_name("pol"), unique_name("pkg")
    with running_fleet(local_stack, nodes=3, labels=labels, image_stores=[BENCH_PACKAGES]) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {
                "default": {"budget": {"count": 1}, "strategy": {"type": "fixed", "initialBatch": 1}}})
            create_package(kube_api_client, run.package(name, package_spec(
                SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=3)))

            async def first_batch_out() -> str:
                report = await fleet_progress(temporal_client, policy)
                waiting = [n for n, p in report.nodes.items() if p.state == "waiting"]
                assert report.counts.get("in_progress") == 1 and waiting, report.counts
                return waiting[0]

            untouched = await assert_eventually_async(first_batch_out, timeout=120)
            client.CoreV1Api(kube_api_client).patch_node(untouched, {"metadata": {"labels": {"fleet-test": None}}})
            kubectl_wait_ready(local_stack, name)
            status = read_package(kube_api_client, name)["status"]
            assert "no longer targeted" in status["message"] and untouched in status["message"], status
            assert status["progress"] == "2/2", status
            assert windows_of(kube_api_client, untouched).count == 0
            assert all(windows_of(kube_api_client, n).count == 1 for n in fleet.node_names if n != untouched)
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


async def test_dependent_of_a_package_failed_in_the_window_is_skipped_and_replays(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    """One node, a Package and its dependent in one window; the first fails its apply: the dependent is
    not run (`skip-dependents-of-failed`), and the node's history replays (and is recorded)."""
    labels = {"fleet-test": unique_name("skip")}
    policy, base, driver = unique_name("pol"), unique_name("base"), unique_name("driver")
    with running_fleet(local_stack, nodes=1, labels=labels) as fleet:
        node = fleet.node_names[0]
        fleet.options.faults.add(Fault("fail-stage", nodes=node, mode="apply", package=base, exit_code=7))
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 1}}})
            create_package(kube_api_client, run.package(base, package_spec(policy=policy, labels=labels)))
            create_package(kube_api_client, run.package(driver, package_spec(
                policy=policy, labels=labels, dependsOn={base: "1.0.0"})))

            async def window_over() -> bool:
                progress = (await fleet_progress(temporal_client, policy)).nodes.get(node)
                assert progress is not None and progress.packages.get(base) == "erroring", progress
                assert progress.state != "in_progress", progress
                return True

            await assert_eventually_async(window_over, timeout=ROLLOUT_TIMEOUT)
            assert windows_of(kube_api_client, node).count == 1
            history = await temporal_client.get_workflow_handle(names.node_workflow_id(node)).fetch_history()
            markers = [e.marker_recorded_event_attributes for e in history.events if e.HasField("marker_recorded_event_attributes")]
            patches = [json.loads(p.data)["id"] for m in markers for p in m.details["patch-data"].payloads]
            assert "skip-dependents-of-failed" in patches, patches
            await replay_and_record({f"node/{RECORDED_AS['skip']}": history}, RECORD_FLEET_HISTORIES_ENV)
        finally:
            for name in (driver, base):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)
