"""Helpers of the integration tests that run `noderoll worker` and `noderoll bridge` (tests/helpers/processes.py):
Packages and DeploymentPolicies created, read, patched and deleted, their conditions and Events, a node's
windows, the bridge's Lease, a fleet's `progress`, and what an operator runs (`kubectl wait`, `temporal
workflow signal`).

Every object a test creates here is labelled `noderoll-test=<run id>` (`NoderollProcesses.package`,
`create_policy`), so only its own group's bridge acts on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from api import keys
from localstack.state import StackInfo
from planning.fleet.codec import progress_from_json
from planning.views.fleet_status import FleetProgress
from protocol import names
from tests.helpers.processes import TEST_LABEL, NoderollProcesses
from tests.helpers.progress import EVERY_NODE

READY_TIMEOUT = 420.0


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    """CustomObjectsApi on `api`."""
    return client.CustomObjectsApi(api)


def create_package(api: client.ApiClient, obj: dict[str, Any]) -> None:
    """Create a Package."""
    custom(api).create_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, obj)


def read_package(api: client.ApiClient, name: str) -> dict[str, Any]:
    """Read a Package."""
    obj: dict[str, Any] = custom(api).get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name)
    return obj


def read_policy(api: client.ApiClient, name: str) -> dict[str, Any]:
    """Read a DeploymentPolicy."""
    obj: dict[str, Any] = custom(api).get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, name)
    return obj


def patch_package(api: client.ApiClient, name: str, body: dict[str, Any]) -> None:
    """Merge-patch a Package."""
    custom(api).patch_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name, body)


def delete_package(api: client.ApiClient, name: str) -> None:
    """Delete a Package (dropping its finalizers first, for cleanup after a test)."""
    try:
        patch_package(api, name, {"metadata": {"finalizers": None}})
        custom(api).delete_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name)
    except client.exceptions.ApiException as err:
        if err.status != 404:
            raise


def create_policy(api: client.ApiClient, run: NoderollProcesses, name: str, spec: dict[str, Any]) -> None:
    """Create a DeploymentPolicy labelled with the run (so the run's cleanup finds it)."""
    body = {"apiVersion": keys.API_VERSION, "kind": keys.POLICY_KIND,
            "metadata": {"name": name, "labels": {TEST_LABEL: run.run_id}}, "spec": spec}
    custom(api).create_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, body)


def delete_policy(api: client.ApiClient, name: str) -> None:
    """Delete a DeploymentPolicy; gone already is fine."""
    try:
        custom(api).delete_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, name)
    except client.exceptions.ApiException as err:
        if err.status != 404:
            raise


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """The status condition of type `kind` (AssertionError when absent, for assert_eventually)."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    raise AssertionError(f"no {kind} condition yet: {obj.get('status')}")


def events_of(api: client.ApiClient, name: str) -> list[client.CoreV1Event]:
    """Events about Package `name` (cluster-scoped objects: namespace default)."""
    selector = f"involvedObject.name={name},involvedObject.kind={keys.PACKAGE_KIND}"
    return list(client.CoreV1Api(api).list_namespaced_event("default", field_selector=selector).items)


def reasons(api: client.ApiClient, name: str) -> list[str]:
    """Event reasons about Package `name`, oldest first."""
    return [e.reason for e in sorted(events_of(api, name), key=lambda e: e.metadata.creation_timestamp)]


def lease_holder(api: client.ApiClient, run: NoderollProcesses) -> str:
    """Holder identity of the run's Lease."""
    lease = client.CoordinationV1Api(api).read_namespaced_lease(run.lease_name, keys.PACKAGE_POD_NAMESPACE)
    return str(lease.spec.holder_identity or "")


def policy_events(api: client.ApiClient, name: str, reason: str) -> list[client.CoreV1Event]:
    """Events with `reason` about DeploymentPolicy `name`."""
    selector = f"involvedObject.name={name},involvedObject.kind={keys.POLICY_KIND},reason={reason}"
    return list(client.CoreV1Api(api).list_namespaced_event("default", field_selector=selector).items)


@dataclass(frozen=True)
class Windows:
    """A node's windows as its aggregated `WindowStarted` Event shows them (one Event per node, issue
    #14): how many, and the last one's message."""

    count: int
    last: str


def windows_of(api: client.ApiClient, node: str) -> Windows:
    """The `WindowStarted` Event of `node` (count and latest message; 0 and "" when none)."""
    events = client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node},reason=WindowStarted").items
    latest = max(events, key=lambda e: e.last_timestamp or e.metadata.creation_timestamp, default=None)
    return Windows(sum(e.count or 1 for e in events), latest.message if latest else "")


async def fleet_progress(temporal: Client, policy: str | None) -> FleetProgress:
    """The fleet's `progress` (AssertionError while it does not run yet, for assert_eventually)."""
    try:
        answer = await temporal.get_workflow_handle(names.fleet_workflow_id(policy)).query(names.QUERY_PROGRESS, EVERY_NODE)
    except (RPCError, WorkflowQueryFailedError) as err:
        raise AssertionError(f"fleet/{policy} does not answer yet: {err}") from err
    return progress_from_json(answer)


def kubectl_wait_ready(stack: StackInfo, name: str, timeout: float = READY_TIMEOUT) -> None:
    """`kubectl wait --for=condition=Ready package/<name>` (what a user or GitOps tool runs)."""
    subprocess.run(
        ["kubectl", "--kubeconfig", str(stack.kubeconfig), "wait", "--for=condition=Ready",
         f"package/{name}", f"--timeout={int(timeout)}s"],
        check=True, capture_output=True, timeout=timeout + 30,
    )


def temporal_signal(stack: StackInfo, workflow_id: str, signal: str, payload: dict[str, Any] | None = None) -> None:
    """Send a signal with the `temporal` CLI, as an operator would from a terminal."""
    argv = [str(Path(sys.executable).parent / "temporal"), "workflow", "signal", "--address", stack.temporal_address,
            "--workflow-id", workflow_id, "--name", signal]
    if payload is not None:
        argv += ["--input", json.dumps(payload)]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
