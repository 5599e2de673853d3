"""Integration tier: every test module ends the fleet and node workflows it left running (on its own task queues)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import ISSUED_TASK_QUEUES
from tests.helpers.workflows_cleanup import STARTED_STACKS, end_workflows, own_running_windows


@pytest.fixture(scope="module", autouse=True)
def _end_fleets_of_the_module() -> Iterator[None]:
    """After the module: terminate the fleets and node workflows still running on this process's task
    queues (see workflows_cleanup)."""
    yield
    for stack in STARTED_STACKS:
        for query in own_running_windows(ISSUED_TASK_QUEUES):
            end_workflows(stack.temporal_address, query)
