"""The local stack is a real control plane and a real Temporal server (issue 2's "Show" list)."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.helpers import unique_name
from tests.helpers.kube import FakeNode, create_ready_node, delete_node

pytestmark = pytest.mark.integration


def test_node_created_through_the_apiserver(kube_api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api_client)
    name = unique_name("node")
    try:
        create_ready_node(core, FakeNode(name, labels={"noderoll.io/test": "yes"}))
        node = core.read_node(name)
        assert node.metadata.labels["noderoll.io/test"] == "yes"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert node.status.allocatable["cpu"] == "8"
    finally:
        delete_node(core, name)
