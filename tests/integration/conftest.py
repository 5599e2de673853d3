"""Integration tier: every test module ends the fleet and node workflows it left running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.workflows_cleanup import RUNNING_WINDOWS, STARTED_STACKS, end_workflows


@pytest.fixture(scope="module", autouse=True)
def _end_fleets_of_the_module() -> Iterator[None]:
    """After the module: terminate the fleets and node workflows still running (see workflows_cleanup)."""
    yield
    for stack in STARTED_STACKS:
        end_workflows(stack.temporal_address, RUNNING_WINDOWS)
