"""Ending the workflows a test module left running on the shared session stack.

`fleet/default` (Packages without a policy) is one workflow id per Temporal namespace: a fleet left
running on a task queue whose worker has stopped would hold that id for the next test module's
bridge (its desired state would reach a run no worker polls). So every test module ends, on
teardown, the fleet and node workflows still running on the task queues this test process made
(tests/integration/conftest.py, `own_running_windows`), and a `NoderollProcesses`
(tests/helpers/processes.py) ends its own fleets before it stops its processes. Only its own: a
second pytest run on the same stack (`NODEROLL_TEST_STACK`) once had its fleet terminated in the
middle of a test by the first run's module teardown.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# The session stack once a test asked for it (tests/conftest.py `local_stack` fills it).
STARTED_STACKS: list[Any] = []
RUNNING_WINDOWS = ("ExecutionStatus = 'Running' AND "
                   "(WorkflowType = 'FleetWorkflow' OR WorkflowType = 'NodeWorkflow')")


def own_running_windows(queues: list[str], chunk: int = 50) -> list[str]:
    """Visibility queries for the running fleet and node workflows on `queues` (chunks of `chunk`
    queues a query, to keep each one short)."""
    return [f"{RUNNING_WINDOWS} AND TaskQueue IN ({', '.join(repr(q) for q in queues[i:i + chunk])})"
            for i in range(0, len(queues), chunk)]


def end_workflows(temporal_address: str, query: str, reason: str = "test module over") -> list[str]:
    """Terminate every workflow matching the visibility `query`; returns their ids."""
    temporal = str(Path(sys.executable).parent / "temporal")
    listed = subprocess.run([temporal, "workflow", "list", "--address", temporal_address, "--query", query,
                             "--output", "json"], capture_output=True, text=True, timeout=60)
    ended = []
    for execution in json.loads(listed.stdout or "[]") or []:
        workflow_id = execution.get("execution", {}).get("workflowId", "")
        subprocess.run([temporal, "workflow", "terminate", "--address", temporal_address,
                        "--workflow-id", workflow_id, "--reason", reason], capture_output=True, timeout=60)
        ended.append(workflow_id)
    return ended
