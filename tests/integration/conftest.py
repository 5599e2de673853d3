"""Integration tier: every test module ends the fleet and node workflows it left running (on its own task
queues); `node`: one simulated node, with the shared Kubernetes client configured for the local stack."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import kube
from localstack.state import StackInfo
from tests.helpers import ISSUED_TASK_QUEUES
from tests.helpers.fleet import running_fleet
from tests.helpers.workflows_cleanup import STARTED_STACKS, end_workflows, own_running_windows


@pytest.fixture(scope="module", autouse=True)
def _end_fleets_of_the_module() -> Iterator[None]:
    """After the module: terminate the fleets and node workflows still running on this process's task
    queues (see workflows_cleanup)."""
    yield
    for stack in STARTED_STACKS:
        for query in own_running_windows(ISSUED_TASK_QUEUES):
            end_workflows(stack.temporal_address, query)


@pytest.fixture
def node(local_stack: StackInfo) -> Iterator[str]:
    """One simulated node (a fleetsim of one) for activities run in an ActivityEnvironment."""
    kube.configure(local_stack.kubeconfig)
    with running_fleet(local_stack, nodes=1) as fleet:
        yield fleet.node_names[0]
