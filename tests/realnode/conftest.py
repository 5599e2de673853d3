"""The real-node tier: a private stack, this machine as its one real node, worker and bridge as processes.

Everything is started here and stopped after the module; where a kubelet cannot run, every test of
the tier skips with the exact reason (not root, no overlayfs, a cgroup controller missing, the
kubelet exiting or never Ready: its last log lines).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realnode.support import RealCluster, start_real_cluster

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/realnode is the `realnode` tier (and needs a stack: `integration`)."""
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.realnode)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A private stack whose only node is this machine (kubelet + containerd), noderoll running on it."""
    with start_real_cluster(tmp_path_factory.mktemp("realnode")) as cluster:
        yield cluster
