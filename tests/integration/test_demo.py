"""`noderoll demo` end to end at small size, on the session stack (no second control plane).

The demo runs as a user runs it (a subprocess of the real CLI) with `--state-dir` naming the
session stack: it finds the stack running, so it reuses it and leaves it running, and it gets a
unique name suffix and task queue so it shares the stack with every other test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client as k8s

from api import keys
from localstack.state import StackInfo
from tests.helpers import assert_eventually, new_task_queue, unique_name

NODES = 6


@pytest.mark.timeout(600)
def test_demo_completes_and_prints_its_summary(local_stack: StackInfo, kube_api_client: k8s.ApiClient) -> None:
    suffix = "-" + unique_name("d").split("-")[-1]
    argv = [sys.executable, "-m", "worker.cli", "demo", "--state-dir", local_stack.state_dir,
            "--nodes", str(NODES), f"--name-suffix={suffix}", "--task-queue", new_task_queue(),
            "--budget-percent", "50", "--soak-seconds", "2", "--timeout", "420", "--plain"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=540, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "reusing the local stack" in output
    assert "noderoll demo summary" in output and "rollout complete" in output
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in done.stdout.splitlines()
             if line.startswith("│")]
    rows = {cells[0]: cells[1:] for cells in table}
    # One column per package, sorted: kmod-blocklist (reboot), then sysctl-tuning (no interrupt).
    assert rows["phase"] == ["Complete", "Complete"], rows
    assert rows["nodes complete"] == [f"{NODES}/{NODES}"] * 2, rows
    assert rows["interrupts"] == [str(NODES), "0"], rows
    assert rows["erroring nodes"] == ["0", "0"] and rows["failed stage Jobs"] == ["0", "0"], rows
    assert all(int(n) >= 2 for n in rows["batches"]), rows
    # Without a terminal the display is one line per change: node stages and batches are visible.
    assert "phase Canary" in output and "in_progress (apply)" in output
    assert "Temporal UI" in output and "/metrics" in output and local_stack.kubeconfig in output

    # It stopped what it started, cleaned its objects and left the stack it found running.
    assert not (Path(local_stack.state_dir) / "demo" / "demo.json").exists()
    assert local_stack.is_running()
    core, custom = k8s.CoreV1Api(kube_api_client), k8s.CustomObjectsApi(kube_api_client)
    names = [p["metadata"]["name"] for p in custom.list_cluster_custom_object(
        keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL)["items"]]
    assert not [n for n in names if n.endswith(suffix)]
    prefix = f"fleetsim.noderoll.io/prefix=demo{suffix}"
    assert_eventually(lambda: not core.list_node(label_selector=prefix).items, timeout=30)
