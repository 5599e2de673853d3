"""`noderoll demo --gates` end to end at small size, on the session stack: a gate holds, then is released.

As tests/integration/test_demo.py (a subprocess of the real CLI reusing the session stack, a unique
name suffix and task queue), plus a real Prometheus (Debian's; skipped with the reason when it cannot
be installed here) that the demo starts itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from localstack.prometheus import prometheus_binary
from localstack.provision import ProvisionError
from localstack.state import StackInfo
from tests.helpers import new_task_queue, unique_name

NODES = 4


@pytest.mark.timeout(600)
def test_demo_gates_shows_a_hold_and_its_release(local_stack: StackInfo) -> None:
    try:
        prometheus_binary()
    except ProvisionError as err:
        pytest.skip(f"no Prometheus server here: {err}")
    suffix = "-" + unique_name("g").split("-")[-1]
    argv = [sys.executable, "-m", "cli", "demo", "--gates", "--state-dir", local_stack.state_dir,
            "--nodes", str(NODES), f"--name-suffix={suffix}", "--task-queue", new_task_queue(),
            "--budget-percent", "50", "--soak-seconds", "2", "--timeout", "420", "--plain"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=540, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    policy = f"fleet/gpu-fleet{suffix}"
    lines = output.splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    held = first(f"{policy} halted: gate gpu-xid-errors failed at ")
    assert "max(noderoll_demo_gpu_xid_errors) = 3 (success condition result < 1" in " ".join(lines[held:held + 2])
    shown = first("phase Halted")
    released = first(f"resume {policy} (the failed gate counts as passed once")
    completed = first("rollout complete")
    assert held < released < completed and shown < completed
    assert f"gate gpu-xid-errors held {policy} for " in output
    assert "phase Progressing" in "\n".join(lines[released:])
