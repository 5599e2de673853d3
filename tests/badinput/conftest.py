"""The bad-input suite's own stack, worker and bridge (one per module; see support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.badinput.support import System, new_system


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/badinput needs a stack: marked `integration`."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """A private stack with `noderoll worker` and `noderoll bridge` as processes."""
    sut = new_system(tmp_path_factory.mktemp("badinput"))
    try:
        yield sut
    finally:
        sut.procs.stop_all()
        sut.recorder.stop()
        sut.api.close()
        sut.stack.stop()
