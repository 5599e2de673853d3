"""`noderoll plan` equals the rollout that follows it, on the real stack (issue 27).

A DeploymentPolicy with a canary and two compartments (`rack-a`: one node at a time; the default:
exponential, budget 2) and two reboot Packages, the second depending on the first, written to a
file and not applied: `noderoll plan -f FILE -o json` (the real command, a process) exits 2 and
says which batches, in which order, and each node's merged window. Then the same objects are
applied and rolled out by `noderoll worker` and `noderoll bridge` on fleetsim nodes, and what
happened is read from Temporal (the fleet's `request_windows` activities: the batches and each
node's SKYHOOK_NODE_ORDER; its `window_result` signals: drain and interrupt per node; each node
workflow's `run_stage_pod` activities: the stages it ran, in order). Each must equal the plan.
Afterwards `noderoll plan` with the applied objects exits 0: nothing would change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient
from temporalio.client import Client

from cli.rollout_history import fleet_histories, node_histories
from localstack.state import StackInfo
from tests.helpers import unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import KMOD_IMAGE, SYSCTL_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
    kubectl_wait_ready,
)

pytestmark = pytest.mark.integration
REBOOT = {"type": "reboot"}


run = noderoll_fixture()


def noderoll_plan(stack: StackInfo, *args: str) -> subprocess.CompletedProcess[str]:
    """`noderoll plan ARGS --temporal-address ... --kubeconfig ...` as a process."""
    argv = [str(Path(sys.executable).parent / "noderoll"), "plan", *args,
            "--temporal-address", stack.temporal_address, "--kubeconfig", str(stack.kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def policy_object(run: NoderollProcesses, name: str) -> dict[str, Any]:
    return {"apiVersion": "noderoll.io/v1alpha1", "kind": "DeploymentPolicy",
            "metadata": {"name": name, "labels": {"noderoll-test": run.run_id}},
            "spec": {"canary": {"count": 1, "soakSeconds": 2},
                     "default": {"budget": {"count": 2},
                                 "strategy": {"type": "exponential", "initialBatch": 1, "growthFactor": 2}},
                     "compartments": [{"name": "rack-a", "selector": {"matchLabels": {"rack": "a"}},
                                       "budget": {"count": 1}, "strategy": {"type": "fixed", "initialBatch": 1}}]}}


def execution_order(window: dict[str, Any]) -> list[tuple[str, str]]:
    """A planned window's stages as the node runs them: every Package's stages before the interrupt,
    the one merged interrupt, then every post-interrupt stage."""
    before, after = [], []
    for package in window["packages"]:
        stages = package["stages"]
        cut = stages.index("interrupt") if "interrupt" in stages else len(stages)
        before += [(package["name"], s) for s in stages[:cut]]
        after += [(package["name"], s) for s in stages[cut + 1:]]
    return before + ([("*", "interrupt")] if window["interrupt"] else []) + after


def stages_run(activity: str, given: dict[str, Any]) -> list[tuple[str, str]]:
    """The (Package, stage) pairs one activity of a node window ran, checks left out: a stage pod runs
    its first Package's modes, then each following Package's (ADR 0016); the merged interrupt is `*`."""
    if activity == "run_interrupt":
        return [("*", "interrupt")]
    if activity != "run_stage_pod":
        return []
    jobs = [given["job"], *given.get("following", [])]
    return [("*" if m == "interrupt" else j["package"], m) for j in jobs for m in (j["modes"] or [j["mode"]])
            if not m.endswith("-check")]


async def test_the_plan_is_what_the_rollout_does(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client, tmp_path: Path
) -> None:
    tag = unique_name("plan")
    policy, kernel, driver = unique_name("pol"), unique_name("kernel"), unique_name("driver")
    selector = {"plan-test": tag}
    packages = [run.package(kernel, package_spec(SYSCTL_IMAGE, policy=policy, labels=selector, interrupt=REBOOT)),
                run.package(driver, package_spec(KMOD_IMAGE, policy=policy, labels=selector,
                                                 interrupt=REBOOT, dependsOn={kernel: "1.0.0"}))]
    manifest = tmp_path / "rollout.yaml"
    manifest.write_text(yaml.safe_dump_all([policy_object(run, policy), *packages]))
    with running_fleet(local_stack, nodes=3, labels={**selector, "rack": "a"}) as rack_a, \
            running_fleet(local_stack, nodes=3, labels={**selector, "rack": "b"}) as rack_b:
        nodes = sorted([*rack_a.node_names, *rack_b.node_names])
        try:
            planned = noderoll_plan(local_stack, "-f", str(manifest), "--fleet", policy, "-o", "json")
            assert planned.returncode == 2, planned.stderr + planned.stdout
            plan = json.loads(planned.stdout)["fleets"][0]
            assert sorted(plan["windows"]) == nodes and plan["changed"] == sorted([kernel, driver])
            assert len(plan["canary"]) == 1 and plan["batches"][0]["canary"]
            assert {n for b in plan["batches"] for n in b["compartments"].get("rack-a", [])} == set(rack_a.node_names)
            started = datetime.now(UTC) - timedelta(seconds=5)

            create_policy(kube_api_client, run, policy, policy_object(run, policy)["spec"])
            for package in packages:
                create_package(kube_api_client, package)
            for name in (kernel, driver):
                kubectl_wait_ready(local_stack, name)

            fleet = [a for h in await fleet_histories(temporal_client, policy) for a in h.activities]
            handed = [a.input for a in fleet if a.type == "request_windows"]
            assert [sorted(h["nodes"]) for h in handed] == [sorted(n for c in b["compartments"].values() for n in c)
                                                             for b in plan["batches"]]
            orders = {n: r["node_order"] for h in handed for n, r in zip(h["nodes"], h["requests"], strict=True)}
            assert orders == {n: w["order"] for n, w in plan["windows"].items()}
            report = await fleet_progress(temporal_client, policy)
            assert report.canary_nodes == plan["canary"]
            answers = {s.payload["node"]: s.payload for h in await fleet_histories(temporal_client, policy)
                       for s in h.signals if s.name == "window_result"}
            for node in nodes:
                window = plan["windows"][node]
                assert (answers[node]["drained"], answers[node]["interrupt"]) == (window["drain"], window["interrupt"])
                ran = [(package, mode) for r in await node_histories(temporal_client, node, started)
                       for a in r.activities for package, mode in stages_run(a.type, a.input)]
                assert ran == execution_order(window), node
                assert [p["name"] for p in window["packages"]] == [kernel, driver]

            again = noderoll_plan(local_stack, "--fleet", policy, "-o", "json")
            assert again.returncode == 0, again.stdout + again.stderr
            assert json.loads(again.stdout)["changes"] is False
        finally:
            for name in (driver, kernel):
                delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)
