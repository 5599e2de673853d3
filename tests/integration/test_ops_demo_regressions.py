"""Regressions of the ops CLI and the demo found while moving them to fleets, on the real stack.

* A fleet whose run has closed (terminated by an earlier demo's clean-up, or ended) must not be
  asked for progress: Temporal answers a query on a closed run from its history, and the demo then
  saw the earlier rollout's `Complete` and exited 0 within a second, before its own fleet started.
* A demo right after another (same names on one stack) found the earlier demo's workload namespace
  still Terminating, took the 409 for "exists", and waited 60 s for a service-account token that a
  Terminating namespace never gets (set-up failed, exit 2).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client
from temporalio.worker import Worker

from cli.ops_client import NoAnswer, Ops, OpsTarget
from demo import processes as procs
from localstack.state import StackInfo
from protocol import names
from protocol.fleet import FleetInput, FleetSpec
from tests.helpers import assert_eventually, new_task_queue, unique_name
from workflows.fleet import FleetWorkflow

HOLD = "noderoll.io/test-hold"


async def test_a_closed_fleet_run_is_not_asked_for_progress(local_stack: StackInfo, temporal_client: Client) -> None:
    policy = unique_name("closed")
    task_queue = new_task_queue()
    # A worker that could replay the closed run's history (and so answer from it) keeps polling.
    async with Worker(temporal_client, task_queue=task_queue, workflows=[FleetWorkflow], activities=[]):
        # A fleet handed no Package ends at once, Complete: a rollout that is over.
        handle = await temporal_client.start_workflow(
            FleetWorkflow.run, FleetInput(policy_name=policy), id=names.fleet_workflow_id(policy),
            task_queue=task_queue, start_signal=names.SIGNAL_FLEET_SPEC, start_signal_args=[FleetSpec(policy)])
        await handle.result()
        ops = await Ops.connect(OpsTarget(local_stack.temporal_address, "default", local_stack.kubeconfig, "test"))
        try:
            with pytest.raises(NoAnswer, match=r"is not running \(its last run is completed\)"):
                await ops.query_fleet(policy)
        finally:
            ops.close()


def test_the_workload_namespace_of_an_earlier_demo_is_waited_out(kube_api_client: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kube_api_client)
    namespace = unique_name("demo-ns")
    core.create_namespace({"metadata": {"name": namespace}})
    # A finalizer keeps the namespace Terminating until the test lets it go.
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "held", "finalizers": [HOLD]}})
    core.delete_namespace(namespace)
    assert_eventually(lambda: _phase(core, namespace) == "Terminating", timeout=30)
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(procs._create_namespace(core, namespace, timeout=120)))
    worker.start()
    try:
        worker.join(timeout=2)
        # Still Terminating: the demo must not go on with it.
        assert worker.is_alive() and _phase(core, namespace) == "Terminating"
        core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
        worker.join(timeout=120)
        assert done == [None] and _phase(core, namespace) == "Active"
    finally:
        try:
            core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
        except ApiException:
            pass
        core.delete_namespace(namespace)


def _phase(core: k8s.CoreV1Api, namespace: str) -> str:
    try:
        return str(core.read_namespace(namespace).status.phase)
    except ApiException as err:
        if err.status == 404:
            return "gone"
        raise
