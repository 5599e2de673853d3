"""`noderoll demo` end to end at small size, on the session stack (no second control plane).

The demo runs as a user runs it (a subprocess of the real CLI) with `--state-dir` naming the
session stack: it finds the stack running, so it reuses it and leaves it running, and it gets a
unique name suffix and task queue so it shares the stack with every other test.

Its two Packages (sysctl-tuning, and kmod-blocklist which depends on it and reboots) roll out as
one fleet, one window per node: every node is drained once and rebooted once. The demo policy's GPU
budgets show: 6 nodes of 8 GPUs in 2 racks, a floor of 39 GPUs (80 %) lets one node go at a time
(the demo says why the second waits) and no two nodes of a rack are seen down at once. The test checks that
from the fleet's own accounting (the demo's summary, read from the fleet's `progress`) and from
sources independent of it: the boot ids the test itself watches on the Nodes while the demo runs,
and the `Cordoned` Events on the Nodes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client as k8s

from api import keys
from localstack.state import StackInfo
from tests.helpers import assert_eventually, new_task_queue, unique_name
from tests.helpers.nodewatch import watching_nodes

NODES = 6


def node_events(core: k8s.CoreV1Api, reason: str, nodes: list[str], since: datetime) -> dict[str, list[str]]:
    """The `reason` occurrences noderoll recorded on these Nodes since `since`: each node's Event (one
    per node and reason, issue #14) as its latest message, `count` times."""
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.kind=Node,reason={reason}").items
    found: dict[str, list[str]] = {node: [] for node in nodes}
    for event in events:
        at = event.first_timestamp or event.metadata.creation_timestamp
        if event.involved_object.name in found and at is not None and at >= since.replace(microsecond=0):
            found[event.involved_object.name].extend([event.message or ""] * (event.count or 1))
    return found


def _rows(stdout: str) -> dict[str, list[str]]:
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in stdout.splitlines() if line.startswith("│")]
    return {cells[0]: cells[1:] for cells in table if cells and cells[0]}


@pytest.mark.timeout(600)
def test_demo_rolls_both_packages_with_one_drain_and_one_reboot_per_node(
    local_stack: StackInfo, kube_api_client: k8s.ApiClient
) -> None:
    suffix = "-" + unique_name("d").split("-")[-1]
    argv = [sys.executable, "-m", "cli", "demo", "--state-dir", local_stack.state_dir,
            "--nodes", str(NODES), f"--name-suffix={suffix}", "--task-queue", new_task_queue(),
            "--budget-percent", "50", "--soak-seconds", "2", "--timeout", "420", "--plain"]
    core, custom = k8s.CoreV1Api(kube_api_client), k8s.CustomObjectsApi(kube_api_client)
    prefix = f"fleetsim.noderoll.io/prefix=demo{suffix}"
    began = datetime.now(UTC)
    with watching_nodes(kube_api_client, prefix) as watch:  # every boot id each Node had: a new one per reboot
        done = subprocess.run(argv, capture_output=True, text=True, timeout=540, check=False)
    seen = watch.boot_ids
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "reusing the local stack" in output
    assert "noderoll demo summary" in output and "rollout complete" in output
    rows = _rows(done.stdout)
    # One column per package, sorted: kmod-blocklist (reboot), then sysctl-tuning (no interrupt).
    assert rows["phase"] == ["Complete", "Complete"], rows
    assert rows["nodes complete"] == [f"{NODES}/{NODES}"] * 2, rows
    assert rows["erroring nodes"] == ["0", "0"] and rows["failed stage pods"] == ["0", "0"], rows

    # The fleet's own accounting: one drain and one reboot per node.
    each = f"{NODES} in all, 1 on each of {NODES} nodes"
    assert rows["fleet phase"] == ["Complete"], rows
    assert rows["disruptions"] == [f"{NODES} nodes, 1 drain and 1 reboot each"], rows
    assert rows["drains"] == [f"{each} (cordons: {NODES})"] and rows["reboots"] == [each], rows
    assert int(rows["batches"][0].split()[0]) >= 2, rows
    # What the demo saw on the nodes, and what this test saw itself.
    assert rows["boot id changes"] == [f"{each} (seen on the Nodes)"], rows
    assert rows["cordon Events"] == [f"{each} (on the Nodes)"], rows
    assert rows["interrupts recorded"] == [f"{each} (on the hosts)"], rows
    nodes = sorted(seen)
    assert len(nodes) == NODES, seen
    assert {node: len(ids) - 1 for node, ids in seen.items()} == dict.fromkeys(nodes, 1), seen
    assert {n: len(m) for n, m in node_events(core, "Cordoned", nodes, began).items()} == dict.fromkeys(nodes, 1)
    # ONE window per node carries both Packages (per-Package rollouts gave every node two windows).
    windows = node_events(core, "WindowStarted", nodes, began)
    both = [f"sysctl-tuning{suffix} 1.0.0, kmod-blocklist{suffix} 1.0.0 (drain)"]
    shared = [n for n, found in windows.items() if [m.removeprefix("node window for ") for m in found] == both]
    assert sorted(shared) == nodes, windows

    # GPU budgets: the floor holds the second node of a batch, and the Nodes never went under it.
    assert "waiting: 32 of 39 GPUs would remain" in output, output[-6000:]
    lowest = re.fullmatch(r"(\d+) of 48 at the lowest \(floor 39\) \(seen on the Nodes\)", rows["GPUs schedulable"][0])
    assert lowest is not None and int(lowest.group(1)) >= 39, rows
    assert rows["nodes of one rack down"] == ["1 at most (max 1) (seen on the Nodes)"], rows

    # Without a terminal the display is one line per change: the fleet, its batches and node stages.
    assert re.search(rf"fleet/gpu-fleet{suffix}: phase Canary, wave \d+, batch #1", output), output[-6000:]
    assert "in_progress (apply)" in output
    assert "window 1 done, 1 drain, 1 reboot so far" in output
    assert "Temporal UI" in output and "/metrics" in output and local_stack.kubeconfig in output
    # The rollout's report (noderoll report): named under "where to look", a timeline row per node.
    report = re.search(r"report\s+: (\S+report\.html)", output)
    assert report is not None, output[-3000:]
    page = Path(report.group(1)).read_text()
    assert all(f'class="node-row" data-node="{n}"' in page for n in nodes), report.group(1)

    # It stopped what it started, cleaned its objects and left the stack it found running.
    assert not (Path(local_stack.state_dir) / "demo" / "demo.json").exists()
    assert local_stack.is_running()
    names = [p["metadata"]["name"] for p in custom.list_cluster_custom_object(
        keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL)["items"]]
    assert not [n for n in names if n.endswith(suffix)]
    assert_eventually(lambda: not core.list_node(label_selector=prefix).items, timeout=30)
