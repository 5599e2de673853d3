"""Helpers of the bridge integration tests: `noderoll worker`/`noderoll bridge` processes, Packages, reads.

Each test group runs its own worker and bridge(s) on a fresh task queue; the bridge only sees
Packages labelled `noderoll-test=<run id>` (`--label-selector`) and holds its own Lease name, so it
never touches another test's Packages, and another test's bridge never holds its Lease.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from api import keys
from localstack.state import StackInfo
from tests.helpers import assert_eventually, new_task_queue, unique_name
from tests.helpers.workflows_cleanup import end_workflows

TEST_LABEL = "noderoll-test"
SYSCTL_IMAGE = "example.local/sysctl-tuning:1.0.0"


@dataclass
class BridgeRun:
    """Worker and bridge processes of one test group, and what they were started with."""

    stack: StackInfo
    logs: Path
    task_queue: str = field(default_factory=new_task_queue)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    lease_name: str = field(default_factory=lambda: unique_name("bridge-lease"))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Extra flags of both processes (e.g. `--cluster NAME`).
    extra: list[str] = field(default_factory=list)

    def _connection(self) -> list[str]:
        return ["--temporal-address", self.stack.temporal_address, "--kubeconfig", str(self.stack.kubeconfig),
                "--task-queue", self.task_queue, *self.extra]

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process record
        proc = subprocess.Popen([sys.executable, "-m", "cli", *argv], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.processes[name] = proc
        return proc

    def start_worker(self, env: dict[str, str] | None = None) -> None:
        """`noderoll worker` on this run's task queue (`env`: extra environment variables)."""
        self._start("worker", ["worker", *self._connection()], env)

    def start_bridge(self, name: str = "bridge") -> str:
        """`noderoll bridge` named `name` (also its Lease identity); returns the identity."""
        self._start(name, ["bridge", *self._connection(), "--label-selector", f"{TEST_LABEL}={self.run_id}",
                           "--lease-name", self.lease_name, "--identity", name,
                           "--resync-seconds", "5", "--status-seconds", "1"])
        return name

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to process `name` and wait for it."""
        proc = self.processes.pop(name)
        proc.send_signal(sig)
        proc.wait(timeout=30)

    def end_fleets(self) -> None:
        """Terminate the fleets still running on this run's task queue (tests/helpers/workflows_cleanup.py)."""
        end_workflows(self.stack.temporal_address, f"TaskQueue = '{self.task_queue}' AND "
                      "WorkflowType = 'FleetWorkflow' AND ExecutionStatus = 'Running'")

    def stop_all(self) -> None:
        """Stop every process still running (SIGTERM, then SIGKILL), after ending this run's fleets."""
        self.end_fleets()
        for name in list(self.processes):
            proc = self.processes[name]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            del self.processes[name]

    def log(self, name: str) -> str:
        """The process's log so far."""
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def package(self, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
        """A Package object labelled for this run's bridge."""
        meta: dict[str, Any] = {"name": name, "labels": {TEST_LABEL: self.run_id}}
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": keys.API_VERSION, "kind": keys.PACKAGE_KIND, "metadata": meta, "spec": spec}


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


def create_policy(api: client.ApiClient, run: BridgeRun, name: str, spec: dict[str, Any]) -> None:
    """Create a DeploymentPolicy labelled with the run (so the run's cleanup finds it)."""
    body = {"apiVersion": keys.API_VERSION, "kind": keys.POLICY_KIND,
            "metadata": {"name": name, "labels": {"noderoll-test": run.run_id}}, "spec": spec}
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


def wait_leading(run: BridgeRun, name: str, timeout: float = 60.0) -> None:
    """Until bridge `name` says it leads."""
    assert_eventually(lambda: f"leading as {name}" in run.log(name), timeout=timeout)


def lease_holder(api: client.ApiClient, run: BridgeRun) -> str:
    """Holder identity of the run's Lease."""
    lease = client.CoordinationV1Api(api).read_namespaced_lease(run.lease_name, keys.PACKAGE_POD_NAMESPACE)
    return str(lease.spec.holder_identity or "")
