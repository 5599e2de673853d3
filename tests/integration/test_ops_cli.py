"""The ops CLI against a running fleet: status (fleets, one Package, json), pause/resume, halt, nodes, logs, retry.

One real fleet for the module: `noderoll worker`, `noderoll bridge` and `noderoll sim` run as
processes (started by the demo's own launcher) on the session stack with a unique task queue and
names; its one Package is sysctl-tuning (no interrupt, so windows are short) on 5 nodes, and fleetsim
fails the `apply` stage of the fleet's last node (its own stable order) three times, so that node
ends erroring and `retry` has something to do. The tests run in file order and follow the rollout
from start to finish; the commands target `fleet/<policy>` with a Package filter, or the whole fleet
with `--fleet`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from api import keys
from cli.main import main
from demo import processes as procs
from demo.resources import DemoNames, DemoObjects, DemoTuning, demo_objects
from fleetsim.nodes import node_name
from localstack.state import StackInfo
from planning.rollout.compartments import stable_order
from protocol import names as protocol_names
from protocol.node_settings import RETRY_BACKOFF_ENV, STAGE_ATTEMPTS_ENV
from service.temporal_client import connect
from tests.helpers import assert_eventually, new_task_queue, unique_name

NODES = 5
ROLLOUT_TIMEOUT = 300.0
SOAK_SECONDS = 1


@dataclass
class Rollout:
    """The module's rollout: names, connection flags and where fleetsim keeps its logs."""

    package: str
    policy: str
    nodes: list[str]
    failing: str
    flags: list[str]
    sandbox: Path


def _objects(names: DemoNames) -> DemoObjects:
    """One package (sysctl-tuning), a policy that never halts on failures: canary, then 1, 2, ...

    The canary soaks for SOAK_SECONDS, then waits for manual promotion (`resume --fleet`).
    """
    objects = demo_objects(names, DemoTuning(soak_seconds=SOAK_SECONDS))
    strategy = {"type": "exponential", "initialBatch": 1, "growthFactor": 2, "batchThreshold": 100,
                "failureThreshold": 10, "safetyLimit": 0}
    objects.policy["spec"] = {"canary": {"count": 1, "soakSeconds": SOAK_SECONDS, "promotion": "manual"},
                              "default": {"budget": {"count": 2}, "strategy": strategy}}
    return DemoObjects(objects.policy, objects.packages[:1])


@pytest.fixture(scope="module")
def rollout(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rollout]:
    """Start worker, bridge and fleet; apply the policy and Package; stop and clean up after the module."""
    from kubernetes import config as k8s_config

    names = DemoNames("-" + unique_name("ops").split("-")[-1])
    run_dir = tmp_path_factory.mktemp("ops-cli")
    objects = _objects(names)
    package = objects.packages[0]
    # The last node in the fleet's own order (keyed by the fleet) runs in the last batch: never the canary.
    identity = protocol_names.fleet_workflow_id(package["spec"]["deploymentPolicy"])
    failing = stable_order([node_name(names.node_prefix, i, NODES) for i in range(NODES)], identity)[-1]
    faults = run_dir / "faults.yaml"
    faults.write_text(json.dumps({"faults": [{"kind": "fail-stage", "nodes": failing, "mode": "apply",
                                              "exitCode": 7, "times": 3}]}))
    launch = procs.DemoLaunch(local_stack, names, NODES, new_task_queue(), faults)
    record = procs.DemoRecord(local_stack.state_dir, str(run_dir), False, names.suffix, objects.package_names,
                              objects.policy["metadata"]["name"], launch.task_queue)
    api = k8s_config.new_client_from_config(config_file=local_stack.kubeconfig)
    try:
        # The worker inherits the environment: the failing node's 3 attempts 1 s and 2 s apart
        # instead of the default 30 s and 60 s (what `retry` shows does not depend on the wait).
        with pytest.MonkeyPatch.context() as env:
            env.setenv(STAGE_ATTEMPTS_ENV, "3")
            env.setenv(RETRY_BACKOFF_ENV, "1")
            procs.start_processes(launch, record)
        nodes = procs.wait_for_fleet(k8s.CoreV1Api(api), launch, record)
        procs.apply_objects(k8s.CustomObjectsApi(api), objects)
        flags = ["--temporal-address", local_stack.temporal_address, "--kubeconfig", local_stack.kubeconfig]
        yield Rollout(objects.package_names[0], record.policy, nodes, failing, flags, Path(record.sandbox_dir))
    finally:
        procs.stop_processes(record)
        procs.delete_objects(api, record)
        api.close()
        # No bridge will ever speak to this fleet again: end it and its node workflows.
        asyncio.run(_terminate(local_stack, record, [node_name(names.node_prefix, i, NODES) for i in range(NODES)]))


async def _terminate(stack: StackInfo, record: procs.DemoRecord, nodes: list[str]) -> None:
    client = await connect(stack.temporal_address)
    await procs.terminate_workflows(client, record, nodes)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _progress(capsys: pytest.CaptureFixture[str], rollout: Rollout) -> dict[str, Any]:
    code, out, err = _cli(capsys, "status", rollout.package, "-o", "json", *rollout.flags)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_status_of_the_package_and_of_its_fleet(rollout: Rollout, capsys: pytest.CaptureFixture[str]) -> None:
    def listed() -> dict[str, Any]:
        data = _progress(capsys, rollout)
        assert data["source"] == "temporal query", data["source"]
        assert data["total_nodes"] == NODES
        # The fleet holds after its canary until `resume --fleet` (see the module docstring).
        assert data["canary_phase"] == "AwaitingPromotion", (data["phase"], data["canary_phase"])
        return data

    data = assert_eventually(listed, timeout=60)
    assert data["package"] == rollout.package and data["version"] == "1.0.0" and data["fleet"] == rollout.policy
    code, out, _ = _cli(capsys, "status", rollout.package, *rollout.flags)
    assert code == 0 and "phase" in out and f"/{NODES} complete" in out and f"fleet/{rollout.policy}" in out
    # Every fleet, its Packages under it.
    code, out, _ = _cli(capsys, "status", *rollout.flags)
    assert code == 0 and f"fleet/{rollout.policy}" in out and "WAVE" in out and rollout.package in out
    assert out.index(f"fleet/{rollout.policy}") < out.index(rollout.package)
    code, out, _ = _cli(capsys, "status", "--fleet", rollout.policy, "--json", *rollout.flags)
    assert code == 0
    (fleet,) = json.loads(out)["fleets"]
    assert fleet["fleet"] == rollout.policy and fleet["source"] == "temporal query" and fleet["wave"] >= 1
    assert fleet["total_nodes"] == NODES and [p["package"] for p in fleet["packages"]] == [rollout.package]


def test_unknown_package_fleet_and_node_are_refused(rollout: Rollout, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "status", "no-such-package", *rollout.flags)
    assert code == 1 and "no Package no-such-package" in err
    code, _, err = _cli(capsys, "halt", "no-such-package", *rollout.flags)
    assert code == 1 and "no Package no-such-package" in err
    code, _, err = _cli(capsys, "status", "--fleet", "no-such-policy", *rollout.flags)
    assert code == 1 and "no fleet no-such-policy" in err
    code, _, err = _cli(capsys, "resume", "--fleet", "no-such-policy", *rollout.flags)
    assert code == 1 and "fleet/no-such-policy is not running" in err
    code, _, err = _cli(capsys, "retry", rollout.package, "--node", "no-such-node", *rollout.flags)
    assert code == 1 and "not a node of fleet/" in err and "no-such-node" in err
    code, _, err = _cli(capsys, "halt", *rollout.flags)
    assert code == 2 and "PACKAGE or --fleet" in err


def test_pause_then_resume_is_observed_in_progress(
    rollout: Rollout, capsys: pytest.CaptureFixture[str], kube_api_client: k8s.ApiClient
) -> None:
    code, out, err = _cli(capsys, "pause", rollout.package, *rollout.flags)
    assert code == 0, err
    assert f"pause sent to fleet/{rollout.policy} for Package {rollout.package}" in out

    def paused_and_idle() -> dict[str, Any]:
        data = _progress(capsys, rollout)
        assert data["phase"] == "Paused", data["phase"]
        # Nothing in flight and nodes left waiting: no new window carries it while paused.
        assert data["counts"].get("in_progress", 0) == 0 and data["counts"].get("waiting", 0) > 0, data["counts"]
        return data

    assert_eventually(paused_and_idle, timeout=120)
    package = k8s.CustomObjectsApi(kube_api_client).get_cluster_custom_object(
        keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, rollout.package)
    assert package["metadata"]["annotations"][keys.PAUSE_ANNOTATION] == "true"
    code, _, err = _cli(capsys, "resume", rollout.package, *rollout.flags)
    assert code == 0, err
    # The Package is back; the fleet still holds for its canary's promotion, and the command says how.
    assert f"resume --fleet {rollout.policy}" in err and "promot" in err, err
    package = k8s.CustomObjectsApi(kube_api_client).get_cluster_custom_object(
        keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, rollout.package)
    assert keys.PAUSE_ANNOTATION not in (package["metadata"].get("annotations") or {})
    assert_eventually(lambda: _progress(capsys, rollout)["phase"] == "Canary", timeout=60)


def test_halt_of_the_package_then_of_the_whole_fleet(rollout: Rollout, capsys: pytest.CaptureFixture[str]) -> None:
    # The Package: kept out of new windows (its phase says Paused) until `resume PKG`.
    code, out, err = _cli(capsys, "halt", rollout.package, *rollout.flags)
    assert code == 0 and f"halt sent to fleet/{rollout.policy} for Package {rollout.package}" in out, err

    def held() -> bool:
        data = _progress(capsys, rollout)
        assert data["phase"] == "Paused" and data["counts"].get("in_progress", 0) == 0, (data["phase"], data["counts"])
        return True

    assert_eventually(held, timeout=120)
    code, _, err = _cli(capsys, "resume", rollout.package, *rollout.flags)
    assert code == 0, err
    assert_eventually(lambda: _progress(capsys, rollout)["phase"] == "Canary", timeout=60)
    # The whole fleet.
    code, out, err = _cli(capsys, "halt", "--fleet", rollout.policy, *rollout.flags)
    assert code == 0 and f"halt sent to fleet/{rollout.policy} for the whole fleet" in out, err

    def halted() -> bool:
        data = _progress(capsys, rollout)
        assert data["phase"] == "Halted" and "by signal" in data["message"], (data["phase"], data["message"])
        return True

    assert_eventually(halted, timeout=60)
    # A Package-scoped resume leaves the fleet's halt alone and says how to lift it.
    code, _, err = _cli(capsys, "resume", rollout.package, *rollout.flags)
    assert code == 0 and f"resume --fleet {rollout.policy}" in err, err
    # The fleet's resume lifts the halt and promotes the canary: the rollout moves on.
    code, _, err = _cli(capsys, "resume", "--fleet", rollout.policy, *rollout.flags)
    assert code == 0, err

    def moving() -> bool:
        data = _progress(capsys, rollout)
        assert data["phase"] not in ("Halted", "Canary") and data["canary_phase"] == "Passed", data
        assert data["counts"].get("complete", 0) > 1 or data["counts"].get("in_progress", 0) > 0, data
        return True

    assert_eventually(moving, timeout=60)


@pytest.mark.timeout(ROLLOUT_TIMEOUT + 60)
def test_rollout_ends_with_the_faulty_node_erroring(rollout: Rollout, capsys: pytest.CaptureFixture[str]) -> None:
    def settled() -> dict[str, Any]:
        data = _progress(capsys, rollout)
        assert data["phase"] == "Failed", (data["phase"], data["counts"])
        return data

    data = assert_eventually(settled, timeout=ROLLOUT_TIMEOUT, interval=2.0)
    assert data["counts"] == {"complete": NODES - 1, "erroring": 1}
    assert list(data["erroring"]) == [rollout.failing]
    code, out, _ = _cli(capsys, "status", rollout.package, *rollout.flags)
    assert code == 0 and "erroring nodes" in out and rollout.failing in out


def test_nodes_show_fleet_state_disruptions_and_package_state(
    rollout: Rollout, capsys: pytest.CaptureFixture[str]
) -> None:
    selector = f"fleetsim.noderoll.io/prefix={rollout.nodes[0].rsplit('-', 1)[0]}"
    code, out, err = _cli(capsys, "nodes", "-l", selector, "--package", rollout.package, "-o", "json", *rollout.flags)
    assert code == 0, err
    rows = {row["node"]: row for row in json.loads(out)}
    by_node = {node: row["packages"][rollout.package] for node, row in rows.items()}
    assert sorted(by_node) == rollout.nodes
    assert by_node[rollout.failing]["state"] == "erroring" and by_node[rollout.failing]["version"] == "1.0.0"
    assert by_node[rollout.failing].get("lastError")
    assert all(by_node[n]["state"] == "complete" for n in rollout.nodes if n != rollout.failing)
    fleets = {node: row["fleets"][rollout.policy] for node, row in rows.items()}
    assert fleets[rollout.failing]["state"] == "erroring"
    # No interrupt: the fleet's windows never cordoned, drained or interrupted a node.
    assert all(f["drains"] == 0 and f["interrupts"] == 0 and f["cordons"] == 0 for f in fleets.values()), fleets
    code, out, _ = _cli(capsys, "nodes", "--fleet", rollout.policy, *rollout.flags)
    assert code == 0 and rollout.failing in out and "erroring" in out and rollout.policy in out, out


def test_logs_of_a_stage_job(rollout: Rollout, capsys: pytest.CaptureFixture[str]) -> None:
    failing = rollout.failing
    code, out, err = _cli(capsys, "logs", rollout.package, "--node", failing, "--mode", "apply",
                          "--sandbox-dir", str(rollout.sandbox), *rollout.flags)
    assert code == 0, err
    assert "source: fleetsim log file" in err and "injected fault fail-stage" in out
    # Without the sandbox (not on this machine) the kubelet's copy of the log tail is what remains.
    code, tail, err = _cli(capsys, "logs", rollout.package, "--node", failing, "--mode", "apply", *rollout.flags)
    assert code == 0 and "source: terminated container message" in err, err
    assert tail.strip() and tail.strip().splitlines()[-1] in out
    # Issue #14: of the three failed attempts only the latest stage pod is kept.
    code, out, err = _cli(capsys, "logs", rollout.package, "--node", failing, "--mode", "apply",
                          "--all", *rollout.flags)
    assert code == 0 and out.count("injected fault fail-stage") == 1, (out, err)
    # A node whose package completed keeps no stage pod: its window deleted them. (Not `nodes[0]`:
    # the failing node is the last in the fleet's own order, keyed by the run's random names, and
    # that is the first node by name in one run of five.)
    completed = next(n for n in rollout.nodes if n != failing)
    code, _, err = _cli(capsys, "logs", rollout.package, "--node", completed, *rollout.flags)
    assert code == 1 and "no stage pod" in err and "deletes its stage pods" in err, err
    code, _, err = _cli(capsys, "logs", rollout.package, "--node", "no-such-node", *rollout.flags)
    assert code == 1 and "no stage pod" in err


def test_retry_of_the_failed_node_completes_the_rollout(rollout: Rollout, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "retry", rollout.package, "--node", rollout.failing, *rollout.flags)
    assert code == 0 and rollout.failing in out, err

    def complete() -> bool:
        data = _progress(capsys, rollout)
        assert data["phase"] == "Complete" and data["counts"] == {"complete": NODES}, (data["phase"], data["counts"])
        return True

    assert_eventually(complete, timeout=180, interval=2.0)
