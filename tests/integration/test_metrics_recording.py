"""Activities record their metrics while doing real work against the real kube-apiserver.

A drain of a node without pods records one `drained` drain.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from prometheus_client import REGISTRY
from temporalio.testing import ActivityEnvironment

from activities import drain, kube
from activities.io import DrainNodeInput
from localstack.state import StackInfo
from tests.helpers import unique_name
from tests.helpers.kube import FakeNode, create_ready_node, delete_node

pytestmark = pytest.mark.integration


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def node(local_stack: StackInfo, kube_api_client: client.ApiClient) -> Iterator[str]:
    kube.configure(local_stack.kubeconfig)
    core = client.CoreV1Api(kube_api_client)
    name = unique_name("metrics-node")
    create_ready_node(core, FakeNode(name))
    try:
        yield name
    finally:
        delete_node(core, name)


def test_drain_of_an_empty_node_is_recorded(node: str) -> None:
    before = sample("noderoll_drain_duration_seconds_count", {"outcome": "drained"})
    result = ActivityEnvironment().run(drain.drain_node, DrainNodeInput(node=node, timeout_seconds=30))
    assert result.evicted == []
    assert sample("noderoll_drain_duration_seconds_count", {"outcome": "drained"}) == before + 1
