"""A simulated fleet for tests: N fleetsim nodes with a unique name prefix, stopped and deleted after.

    with running_fleet(local_stack, nodes=2) as fleet:
        node = fleet.node_names[0]
        fleet.sandbox(node)                      # the node's host root
        fleet.options.faults.add(Fault("fail-stage", nodes=node, mode="apply", exit_code=7))

The fleet runs in this process on background threads (its agent runs are real subprocesses), so a
test can read sandboxes and add faults while it runs. Every fleet gets its own prefix
(`unique_name("sim")`) so one stack serves the whole session; the nodes and their Leases are
deleted when the block exits. `fleet_factory` is the same as a pytest fixture.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from fleetsim.context import FleetOptions
from fleetsim.fleet import Fleet
from tests.helpers import unique_name

# Tests need not wait a real 30 s grace period or a long reboot.
TEST_MAX_GRACE_SECONDS = 5.0
TEST_REBOOT_SECONDS = 1.0


def _kubeconfig(stack: Any) -> str:
    return stack if isinstance(stack, str) else str(stack.kubeconfig)


@contextmanager
def running_fleet(stack: Any, nodes: int = 1, **options: Any) -> Iterator[Fleet]:
    """Start a fleet of `nodes` against a `StackInfo` (or a kubeconfig path); stop and delete it after.

    `options` are FleetOptions fields (labels, faults, reboot_seconds, image_stores, ...).
    """
    prefix = options.pop("name_prefix", None) or unique_name("sim")
    with tempfile.TemporaryDirectory(prefix=f"fleetsim-{prefix}-") as sandbox:
        opts = FleetOptions(
            nodes=nodes,
            kubeconfig=_kubeconfig(stack),
            name_prefix=prefix,
            sandbox_dir=Path(sandbox),
            max_grace_seconds=options.pop("max_grace_seconds", TEST_MAX_GRACE_SECONDS),
            reboot_seconds=options.pop("reboot_seconds", TEST_REBOOT_SECONDS),
            delete_nodes_on_stop=True,
            **options,
        )
        fleet = Fleet(opts).start()
        try:
            yield fleet
        finally:
            fleet.stop()


@pytest.fixture
def fleet_factory(local_stack: Any) -> Iterator[Callable[..., Fleet]]:
    """`fleet_factory(nodes=3, **options)` starts a fleet on the session stack, stopped after the test."""
    with ExitStack() as stack:

        def make(nodes: int = 1, **options: Any) -> Fleet:
            return stack.enter_context(running_fleet(local_stack, nodes, **options))

        yield make
