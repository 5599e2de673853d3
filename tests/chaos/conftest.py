"""The reliability suite's own stack: it restarts Temporal and the apiserver, so never the shared one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.chaos import ChaosStack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/chaos is marked `chaos` (and needs a stack, so `integration` too)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def chaos_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosStack]:
    """A private local stack for one chaos module, stopped and purged afterwards."""
    stack = ChaosStack.start(tmp_path_factory.mktemp("chaos-stack"))
    try:
        yield stack
    finally:
        stack.stop()
