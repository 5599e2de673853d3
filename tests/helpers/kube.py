"""Kubernetes helpers for integration tests: fake Nodes the scheduler accepts, namespaces ready for pods.

There is no kubelet in the local stack; a Node object plus a Ready status written through the
status subresource is what the scheduler and the controllers see. (fleetsim does the same for a
whole fleet, with heartbeats; these helpers are for tests that need one or two static nodes.)
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import assert_eventually


@dataclass(frozen=True)
class FakeNode:
    """A Node to create: name, labels and the capacity it reports."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    cpu: str = "8"
    memory: str = "32Gi"
    pods: str = "110"


def create_ready_node(core: client.CoreV1Api, node: FakeNode) -> client.V1Node:
    """Create `node` and report it Ready with capacity, as a kubelet would on registration."""
    labels = {"kubernetes.io/hostname": node.name, **node.labels}
    core.create_node({"metadata": {"name": node.name, "labels": labels}})
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": node.cpu, "memory": node.memory, "pods": node.pods}
    status = {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node of a test",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
    }
    return core.patch_node_status(node.name, status)


def delete_node(core: client.CoreV1Api, name: str) -> None:
    """Delete a Node, ignoring one that is already gone."""
    try:
        core.delete_node(name)
    except ApiException as err:
        if err.status != 404:
            raise


def create_namespace(core: client.CoreV1Api, name: str, timeout: float = 30.0) -> None:
    """Create a namespace and wait until pods can be created in it.

    Kubernetes 1.20 refuses pods until the token controller has given the namespace's
    `default` service account its token secret.
    """
    core.create_namespace({"metadata": {"name": name}})

    def has_token() -> bool:
        account = core.read_namespaced_service_account("default", name)
        assert account.secrets, f"service account default/{name} has no token yet"
        return True

    assert_eventually(has_token, timeout=timeout, retry_on=(AssertionError, ApiException))


def delete_namespace(core: client.CoreV1Api, name: str) -> None:
    """Delete a namespace without waiting (the namespace controller empties it)."""
    try:
        core.delete_namespace(name)
    except ApiException as err:
        if err.status != 404:
            raise
