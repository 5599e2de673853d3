"""Helpers of the integration tests that run `noderoll worker` and `noderoll bridge` (tests/helpers/processes.py):
Packages and DeploymentPolicies created, read, patched and deleted, their conditions and Events, the bridge's Lease.

Every object a test creates here is labelled `noderoll-test=<run id>` (`NoderollProcesses.package`,
`create_policy`), so only its own group's bridge acts on it.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from api import keys
from tests.helpers.processes import TEST_LABEL, NoderollProcesses


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
