"""A sampled benchmark wave (issue 45): the first W windows of a fleet's wave, then a halt. Does Temporal I/O.

A 10,000-node wave under a budget of 50 windows takes hours; its cost per window is the same in its first
thousand windows as in the rest (the fleet's decisions are what may grow with the fleet, and they do so
from the first window on). So a sampled run lets the fleet target every node, counts the node windows
that began (`noderoll-node` runs on the run's own task queue, Temporal's visibility) and, once `windows`
of them began, signals `halt` to the fleet: requests not started are withdrawn, windows that run finish.
The run ends when every window that began has closed (its answer recorded by the fleet).

While it runs, the Packages' and the policy's status objects are read at each poll and their largest
JSON size kept (`StatusSizes`): what etcd stores for them, which the issue caps at 64 KB.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from protocol.names import NODE_WORKFLOW_TYPE, SIGNAL_HALT, fleet_workflow_id

POLL_SECONDS = 2.0
# After the halt, how long the windows that began may take to close before the run gives up.
DRAIN_TIMEOUT_SECONDS = 1800.0


@dataclass
class StatusSizes:
    """The largest `status` (JSON bytes) seen per object kind while the run polled."""

    largest: dict[str, int] = field(default_factory=dict)

    def note(self, kind: str, status: dict[str, Any] | None) -> None:
        """Keep `status`'s size when it is the largest of its kind so far."""
        size = len(json.dumps(status or {}, separators=(",", ":")))
        self.largest[kind] = max(self.largest.get(kind, 0), size)


def node_runs_query(task_queue: str, running: bool = False) -> str:
    """The visibility query of the run's node windows (those still running only with `running`). Pure."""
    query = f"WorkflowType = '{NODE_WORKFLOW_TYPE}' AND TaskQueue = '{task_queue}'"
    return query + " AND ExecutionStatus = 'Running'" if running else query


async def count_runs(temporal: Client, task_queue: str, running: bool = False) -> int:
    """Node windows of the run that began (or still run)."""
    return (await temporal.count_workflows(node_runs_query(task_queue, running))).count


@dataclass
class SampleEnd:
    """When the sampled run halted its fleet and when its last window closed (monotonic), and the windows;
    `at_deadline`: the halt came at the run's deadline, not after its windows (the fleet did not get there)."""

    halted_at: float
    ended_at: float
    windows_begun: int
    at_deadline: bool = False


@dataclass(frozen=True)
class Sample:
    """Which fleet to halt after how many windows, and where its node windows run."""

    temporal: Client
    policy: str
    task_queue: str
    windows: int
    # Monotonic time after which the fleet is halted whatever the windows begun (None: no deadline).
    deadline: float | None = None


async def run_sample(sample: Sample, poll: Callable[[], None], log: Callable[[str], None]) -> SampleEnd:
    """Wait until `sample.windows` windows began (or the deadline passed), halt the fleet, wait until none runs
    (module docstring). `poll` is called at every poll (the caller reads the status objects, checks its processes)."""
    temporal, task_queue = sample.temporal, sample.task_queue
    begun = 0
    while begun < sample.windows and (sample.deadline is None or time.monotonic() < sample.deadline):
        poll()
        await asyncio.sleep(POLL_SECONDS)
        begun = await count_runs(temporal, task_queue)
    return await halt_and_drain(sample, poll, log, at_deadline=begun < sample.windows)


async def halt_and_drain(sample: Sample, poll: Callable[[], None], log: Callable[[str], None],
                         at_deadline: bool = False) -> SampleEnd:
    """Halt the fleet and wait until none of its windows runs."""
    temporal, policy, task_queue = sample.temporal, sample.policy, sample.task_queue
    await temporal.get_workflow_handle(fleet_workflow_id(policy)).signal(SIGNAL_HALT)
    halted = time.monotonic()
    begun = await count_runs(temporal, task_queue)
    why = "the run's deadline passed" if at_deadline else "the sample's windows began"
    log(f"{policy}: {begun} windows began; {why}: fleet halted, waiting for them to close")
    deadline = halted + DRAIN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        poll()
        await asyncio.sleep(POLL_SECONDS)
        if await count_runs(temporal, task_queue, running=True) == 0:
            begun = await count_runs(temporal, task_queue)
            return SampleEnd(halted, time.monotonic(), begun, at_deadline)
    raise TimeoutError(f"{policy}: windows still running {DRAIN_TIMEOUT_SECONDS:.0f} s after the halt")
