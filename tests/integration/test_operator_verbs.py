"""Operator verbs on the real stack (issue 16 item 3): `noderoll rerun`, `node reset`, `node ignore`,
`logs --follow`, `version`, each as the CLI runs them and the non-CLI way (annotations).

Every Package uses the bench-sleep image, whose stage pods are counted per node and mode: a rerun or
a reset must run exactly the stage pods it says (and none on the other nodes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client

from api import keys
from fleetsim.fleet import Fleet
from localstack.state import StackInfo
from protocol.version import noderoll_version
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import BENCH_PACKAGES, SLEEP_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
    patch_package,
    windows_of,
)

pytestmark = pytest.mark.integration
TIMEOUT = 240.0


run = noderoll_fixture(retry_backoff_seconds=1)


def noderoll(run: NoderollProcesses, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run the `noderoll` CLI against the test stack (as an operator would)."""
    return run.cli(*argv)


def runs(fleet: Fleet, package: str) -> Counter[tuple[str, str]]:
    """(node, mode) -> how often each stage (not check) of `package` ran on the nodes, from the agent's
    step journal on each host (`history.jsonl`): stage pods are deleted after their window (issue #14)."""
    found: Counter[tuple[str, str]] = Counter()
    for node in fleet.node_names:
        for journal in (fleet.sandbox(node) / "var" / "lib" / "noderoll" / package).glob("*/history.jsonl"):
            for line in journal.read_text().splitlines():
                mode = json.loads(line)["mode"]
                if not mode.endswith("-check"):
                    found[(node, mode)] += 1
    return found


async def settled(temporal: Client, policy: str, package: str, nodes: int) -> None:
    """Until the fleet is Complete with `package` complete on `nodes` nodes."""

    async def check() -> bool:
        report = await fleet_progress(temporal, policy)
        assert report.phase.value == "Complete", (report.phase, report.message)
        assert report.packages[package].counts.get("complete") == nodes, report.packages[package].counts
        return True

    await assert_eventually_async(check, timeout=TIMEOUT)


def recorded(api: ApiClient, node: str) -> dict[str, Any]:
    annotation = (client.CoreV1Api(api).read_node(node).metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION)
    return dict(json.loads(annotation or "{}").get("packages", {}))


async def test_rerun_runs_exactly_what_it_says(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"verbs-test": unique_name("rerun")}
    policy, name = unique_name("pol"), unique_name("again")
    with running_fleet(local_stack, nodes=3, labels=labels, image_stores=[BENCH_PACKAGES]) as fleet:
        first, second, third = sorted(fleet.node_names)
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 3}}})
            spec = package_spec(SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=1)
            create_package(kube_api_client, run.package(name, spec))
            await settled(temporal_client, policy, name, 3)
            before = runs(fleet, name)
            assert before == Counter({(n, m): 1 for n in fleet.node_names for m in ("apply", "config")}), before

            # The CLI: one node, from the config stage. Then the same id again (ignored), then another node.
            noderoll(run, "rerun", name, "--node", first, "--stage", "config", "--id", "r-one")
            noderoll(run, "rerun", name, "--node", first, "--stage", "config", "--id", "r-one")
            noderoll(run, "rerun", name, "--node", second, "--id", "r-two")
            expected = before + Counter({(first, "config"): 1, (second, "apply"): 1, (second, "config"): 1})
            assert_eventually(lambda: runs(fleet, name) == expected, timeout=TIMEOUT)
            await settled(temporal_client, policy, name, 3)
            assert runs(fleet, name) == expected

            # The annotation (kubectl annotate): every node, the whole sequence, once per id.
            patch_package(kube_api_client, name, {"metadata": {"annotations": {keys.RERUN_ANNOTATION: "a1"}}})
            expected += Counter({(n, m): 1 for n in fleet.node_names for m in ("apply", "config")})
            assert_eventually(lambda: runs(fleet, name) == expected, timeout=TIMEOUT)
            await settled(temporal_client, policy, name, 3)
            # Another annotation edit re-sends the desired state with the same rerun id: nothing runs.
            patch_package(kube_api_client, name, {"metadata": {"annotations": {"touched": "yes"}}})
            noderoll(run, "rerun", name, "--node", third, "--stage", "config", "--id", "r-three")
            expected += Counter({(third, "config"): 1})
            assert_eventually(lambda: runs(fleet, name) == expected, timeout=TIMEOUT)
            await settled(temporal_client, policy, name, 3)
            assert runs(fleet, name) == expected
            assert all(recorded(kube_api_client, n)[name]["state"] == "complete" for n in fleet.node_names)
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


async def test_reset_forgets_the_record_and_the_next_window_installs_again(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"verbs-test": unique_name("reset")}
    policy, name, other = unique_name("pol"), unique_name("kept"), unique_name("other")
    with running_fleet(local_stack, nodes=3, labels=labels, image_stores=[BENCH_PACKAGES]) as fleet:
        first, second, third = sorted(fleet.node_names)
        core = client.CoreV1Api(kube_api_client)
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 3}}})
            spec = package_spec(SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=1)
            create_package(kube_api_client, run.package(name, spec))
            create_package(kube_api_client, run.package(other, spec))
            await settled(temporal_client, policy, name, 3)
            await settled(temporal_client, policy, other, 3)
            before = {p: runs(fleet, p) for p in (name, other)}

            # The CLI, one package on one node: only that package is installed again, only there.
            noderoll(run, "node", "reset", first, "--package", name, "--task-queue", run.task_queue)
            expected = before[name] + Counter({(first, "apply"): 1, (first, "config"): 1})
            assert_eventually(lambda: runs(fleet, name) == expected, timeout=TIMEOUT)
            await settled(temporal_client, policy, name, 3)
            assert runs(fleet, other) == before[other]

            # The annotation (kubectl annotate), the whole record of another node: both packages again there.
            core.patch_node(second, {"metadata": {"annotations": {keys.RESET_ANNOTATION: "k1"}}})
            expected += Counter({(second, "apply"): 1, (second, "config"): 1})
            others = before[other] + Counter({(second, "apply"): 1, (second, "config"): 1})
            assert_eventually(lambda: (runs(fleet, name), runs(fleet, other)) == (expected, others),
                              timeout=TIMEOUT)
            assert keys.RESET_ANNOTATION not in (core.read_node(second).metadata.annotations or {})

            # The way out of an unreadable record: held (blocked) until reset, then installed again.
            core.patch_node(third, {"metadata": {"annotations": {keys.NODE_STATE_ANNOTATION: "{garbage"}}})

            async def held() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.packages[name].blocked.get(third), report.packages[name].blocked
                return True

            await assert_eventually_async(held, timeout=TIMEOUT)
            noderoll(run, "node", "reset", third, "--task-queue", run.task_queue)
            expected += Counter({(third, "apply"): 1, (third, "config"): 1})
            others += Counter({(third, "apply"): 1, (third, "config"): 1})
            assert_eventually(lambda: (runs(fleet, name), runs(fleet, other)) == (expected, others),
                              timeout=TIMEOUT)
            await settled(temporal_client, policy, name, 3)
            await settled(temporal_client, policy, other, 3)
            assert (runs(fleet, name), runs(fleet, other)) == (expected, others)
        finally:
            for package in (name, other):
                delete_package(kube_api_client, package)
            delete_policy(kube_api_client, policy)


async def test_ignore_keeps_the_node_out_of_the_next_batch(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"verbs-test": unique_name("ign")}
    policy, name = unique_name("pol"), unique_name("one")
    with running_fleet(local_stack, nodes=3, labels=labels, image_stores=[BENCH_PACKAGES]) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {
                "default": {"budget": {"count": 1}, "strategy": {"type": "fixed", "initialBatch": 1}}})
            # Stages long enough (2 x 8 s) that both ignores land while the first window runs: at a load
            # of 10 a `noderoll` command took 9 s to start, and a 4 s stage let the next batch go first.
            spec = package_spec(SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=8)
            create_package(kube_api_client, run.package(name, spec))

            async def one_in_window() -> str:
                report = await fleet_progress(temporal_client, policy)
                out = [n for n, p in report.nodes.items() if p.state == "in_progress"]
                assert len(out) == 1, report.counts
                return out[0]

            busy = await assert_eventually_async(one_in_window, timeout=TIMEOUT)
            left_out = sorted(n for n in fleet.node_names if n != busy)[0]
            rest = next(n for n in fleet.node_names if n not in (busy, left_out))
            # The node in flight finishes its window; the other one gets none while ignored (ignored
            # first: it is the one the next batch would take).
            noderoll(run, "node", "ignore", left_out)
            noderoll(run, "node", "ignore", busy)

            def others_done() -> bool:
                assert recorded(kube_api_client, busy).get(name, {}).get("state") == "complete"
                assert recorded(kube_api_client, rest).get(name, {}).get("state") == "complete"
                return True

            assert_eventually(others_done, timeout=TIMEOUT)

            async def idle() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.phase.value == "Complete" and not report.counts.get("in_progress"), report
                return True

            await assert_eventually_async(idle, timeout=TIMEOUT)
            assert windows_of(kube_api_client, left_out).count == 0 and recorded(kube_api_client, left_out) == {}
            noderoll(run, "node", "unignore", left_out)
            assert_eventually(lambda: recorded(kube_api_client, left_out).get(name, {}).get("state") == "complete",
                              timeout=TIMEOUT)
            assert windows_of(kube_api_client, left_out).count == 1 and windows_of(kube_api_client, busy).count == 1
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


def test_logs_follow_streams_the_stage_while_it_runs(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient
) -> None:
    labels = {"verbs-test": unique_name("follow")}
    policy, name = unique_name("pol"), unique_name("talk")
    with running_fleet(local_stack, nodes=1, labels=labels, image_stores=[BENCH_PACKAGES]) as fleet:
        node = fleet.node_names[0]
        argv = [sys.executable, "-m", "cli", "logs", name, "--node", node, "--mode", "apply", "--follow",
                "--sandbox-dir", str(fleet.options.sandbox_dir), "--wait-seconds", "120",
                "--temporal-address", local_stack.temporal_address, "--kubeconfig", str(local_stack.kubeconfig)]
        follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 1}}})
            create_package(kube_api_client, run.package(name, package_spec(
                SLEEP_IMAGE, policy=policy, labels=labels, stage_seconds=8,
                env=[{"name": "BENCH_STAGE_OUTPUT_BYTES", "value": "12"}])))
            assert follower.stdout is not None
            first = follower.stdout.readline()
            # The stage printed its first line and sleeps: the pod still runs while we read it.
            pods = client.CoreV1Api(kube_api_client).list_namespaced_pod(
                keys.PACKAGE_POD_NAMESPACE, label_selector=f"noderoll.io/package={name},noderoll.io/mode=apply").items
            if not first:  # the follower ended without a line: say why
                follower.wait(timeout=30)
                raise AssertionError(f"logs --follow printed nothing: {follower.stderr.read() if follower.stderr else ''}")
            assert [p.status.phase for p in pods] == ["Running"], (first, [p.status.phase for p in pods])
            # Read through the same buffered stream as `first` (communicate() would skip what it buffered).
            rest = follower.stdout.read()
            assert follower.wait(timeout=120) == 0
            errors = follower.stderr.read() if follower.stderr else ""
            assert "x" * 12 in first + rest and "bench-sleep: apply done after 8s" in rest, first + rest
            assert "fleetsim log file" in errors, errors
        finally:
            if follower.poll() is None:
                follower.kill()
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


def test_version_names_the_client_the_worker_and_the_bridge(run: NoderollProcesses) -> None:
    result = noderoll(run, "version", "-o", "json", "--task-queue", run.task_queue, "--lease-name", run.lease_name)
    report = json.loads(result.stdout)
    version = noderoll_version()
    assert report["client"] == version
    assert [w["version"] for w in report["workers"]] == [version], report["workers"]
    assert report["bridge"]["version"] == version and report["bridge"]["holder"] == "bridge", report["bridge"]
