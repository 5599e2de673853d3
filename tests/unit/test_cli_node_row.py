"""`cli.ops_client.node_row`: one Node as API JSON (the CLI lists Nodes raw, issue 45) into the CLI's row."""

from __future__ import annotations

from cli.ops_client import node_row
from planning.node.drain import CONDITION_DRAINING


def test_a_node_read_raw_shows_its_status_cordon_packages_and_drain() -> None:
    node = {
        "metadata": {"name": "gpu-7", "labels": {"noderoll.io/status": "in-progress", "pool": "a100"},
                     "annotations": {"noderoll.io/cordoned-by": "noderoll",
                                     "noderoll.io/state": '{"version": 1, "packages": {"kernel": {"name": "kernel", '
                                                          '"version": "1.0.0", "stage": "apply", "state": "in_progress"}}}'}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": CONDITION_DRAINING, "status": "True", "reason": "PodsBlocking", "message": "1 pod left",
             "lastTransitionTime": "2026-12-07T18:00:00Z"}],
            "nodeInfo": {"bootID": "b-1"}, "allocatable": {"nvidia.com/gpu": "8"}},
    }
    row = node_row(node)
    assert (row.name, row.status, row.ready, row.cordoned, row.cordoned_by_noderoll) == (
        "gpu-7", "in-progress", True, True, True)
    assert row.state_problem is None and row.packages["kernel"].stage.value == "apply"
    assert row.boot_id == "b-1" and row.labels["pool"] == "a100"
    assert row.drain is not None and row.drain.draining and row.drain.reason == "PodsBlocking"
    assert row.drain.since == "2026-12-07T18:00:00Z"


def test_a_bare_node_has_no_drain_and_no_packages() -> None:
    row = node_row({"metadata": {"name": "n"}})
    assert (row.name, row.ready, row.cordoned, row.drain, row.packages) == ("n", False, False, None, {})
