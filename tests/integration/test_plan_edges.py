"""`noderoll plan`'s edges on the real stack, the command run as a process (issue 43 item 4): a CI gate on
its exit code must not pass a typo.

* `--fleet` naming no fleet exits 1 and names the fleets there are;
* `-f` of what `kubectl get -o yaml` writes (`kind: List`) plans its items, a ConfigMap beside them is
  skipped with a note, and a misspelled kind exits 1 naming the kind and the file;
* a running fleet that does not answer (no worker polls its task queue) exits 1 naming it, not planned
  as if no fleet ran; with `--cluster NAME` the fleet asked is `fleet/<cluster>/<policy>`, and the plan
  orders the nodes by that id, as the cluster's fleet does.

No worker or bridge runs here: the plan reads the cluster and Temporal only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CustomObjectsApi
from temporalio.client import Client

from api import keys
from fleetsim.fleet import Fleet
from localstack.state import StackInfo
from planning.rollout.compartments import stable_order
from protocol import names
from protocol.fleet import FleetInput
from tests.helpers import new_task_queue, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import package_spec

pytestmark = pytest.mark.integration


def noderoll_plan(stack: StackInfo, *args: str) -> subprocess.CompletedProcess[str]:
    """`noderoll plan ARGS --temporal-address ... --kubeconfig ...` as a process."""
    argv = [str(Path(sys.executable).parent / "noderoll"), "plan", *args,
            "--temporal-address", stack.temporal_address, "--kubeconfig", str(stack.kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def fleet(local_stack: StackInfo) -> Iterator[Fleet]:
    """Three simulated nodes only this module's Packages select."""
    with running_fleet(local_stack, nodes=3, labels={"plan-edges": unique_name("edges")}) as nodes:
        yield nodes


def objects(fleet: Fleet, policy: str) -> list[dict[str, Any]]:
    """A DeploymentPolicy and a reboot Package of it selecting the module's nodes (not applied)."""
    labels = dict(fleet.options.labels)
    return [{"apiVersion": keys.API_VERSION, "kind": keys.POLICY_KIND, "metadata": {"name": policy},
             "spec": {"default": {"budget": {"count": 1}}}},
            {"apiVersion": keys.API_VERSION, "kind": keys.PACKAGE_KIND, "metadata": {"name": unique_name("kernel")},
             "spec": package_spec(policy=policy, labels=labels, interrupt={"type": "reboot"})}]


def test_a_fleet_that_does_not_exist_exits_1_naming_the_fleets_there_are(
    local_stack: StackInfo, kube_api_client: ApiClient
) -> None:
    policy = unique_name("pol")
    custom = CustomObjectsApi(kube_api_client)
    custom.create_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, {
        "apiVersion": keys.API_VERSION, "kind": keys.POLICY_KIND, "metadata": {"name": policy},
        "spec": {"default": {"budget": {"count": 1}}}})
    try:
        typo = policy[:-1]
        planned = noderoll_plan(local_stack, "--fleet", typo)
        assert planned.returncode == 1, planned.stdout + planned.stderr
        assert f"--fleet {typo}: no such fleet" in planned.stderr and policy in planned.stderr
        assert "default" in planned.stderr and f"did you mean {policy}?" in planned.stderr
        # The policy itself is a fleet, with nothing to do: no changes.
        there = noderoll_plan(local_stack, "--fleet", policy)
        assert there.returncode == 0 and "no changes" in there.stdout, there.stdout + there.stderr
    finally:
        custom.delete_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, policy)


def test_a_kubectl_list_is_planned_and_a_misspelled_kind_refused(
    local_stack: StackInfo, fleet: Fleet, tmp_path: Path
) -> None:
    policy = unique_name("pol")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {}}
    listed = tmp_path / "objects.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                      "items": [*objects(fleet, policy), configmap]}))
    planned = noderoll_plan(local_stack, "-f", str(listed), "--fleet", policy, "-o", "json")
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert sorted(json.loads(planned.stdout)["fleets"][0]["windows"]) == sorted(fleet.node_names)
    assert "skipped ConfigMap/settings (apiVersion v1: not noderoll.io)" in planned.stderr

    policy_object, package = objects(fleet, policy)
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump_all([policy_object, {**package, "kind": "Pakage"}]))
    refused = noderoll_plan(local_stack, "-f", str(typo), "--fleet", policy)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"{typo}:" in refused.stderr and "kind 'Pakage' is not a noderoll kind (did you mean Package?)" in refused.stderr
    assert refused.stdout == ""


async def test_a_clusters_fleet_that_does_not_answer_exits_1_and_its_order_is_the_clusters(
    local_stack: StackInfo, fleet: Fleet, temporal_client: Client, tmp_path: Path
) -> None:
    policy, cluster = unique_name("pol"), unique_name("east")
    manifest = tmp_path / "objects.yaml"
    manifest.write_text(yaml.safe_dump_all(objects(fleet, policy)))
    # The cluster's fleet never ran: planned as a new one, its nodes in the order of its id.
    planned = noderoll_plan(local_stack, "-f", str(manifest), "--fleet", policy, "--cluster", cluster, "-o", "json")
    assert planned.returncode == 2, planned.stdout + planned.stderr
    windows = json.loads(planned.stdout)["fleets"][0]["windows"]
    order = sorted(windows, key=lambda n: windows[n]["order"])
    assert order == stable_order(fleet.node_names, names.fleet_workflow_id(policy, cluster))

    # The cluster's fleet runs, and no worker polls its task queue: it cannot answer.
    fleet_id = names.fleet_workflow_id(policy, cluster)
    handle = await temporal_client.start_workflow(names.FLEET_WORKFLOW_TYPE, FleetInput(policy, cluster=cluster),
                                                  id=fleet_id, task_queue=new_task_queue())
    try:
        silent = noderoll_plan(local_stack, "-f", str(manifest), "--fleet", policy, "--cluster", cluster)
        assert silent.returncode == 1, silent.stdout + silent.stderr
        assert f"{fleet_id} did not answer within 5s (is a worker polling its task queue?)" in silent.stderr
        assert "the plan cannot tell what the fleet rolls out now" in silent.stderr
    finally:
        await handle.terminate(reason="test over")
