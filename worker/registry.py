"""Every workflow and activity that `noderoll worker` registers, in one list each. No I/O at import.

Owners append their own entries. `tests/unit/test_worker_registration.py` checks that each takes
at most one dataclass/pydantic parameter and that activity names are `verb_object`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.describe import describe_workflow_runs
from activities.drain import drain_node, wait_protected_pods
from activities.eviction_notice import announce_eviction
from activities.fleet import list_fleet_nodes, read_node_supply, request_windows
from activities.global_reports import report_to_global
from activities.interrupts import run_interrupt
from activities.node_marks import mark_blocked_nodes
from activities.nodes import cordon_node, read_node, uncordon_node, write_node_state
from activities.prometheus import query_prometheus
from activities.stage_cleanup import delete_stage_jobs
from activities.stage_run import run_stage_pod
from activities.upcoming import mark_upcoming_nodes
from activities.verify_run import run_verify_pod
from activities.window_close import close_window
from workflows.fleet import FleetWorkflow
from workflows.global_rollout import GlobalRolloutWorkflow
from workflows.node import NodeWorkflow

WORKFLOWS: list[type] = [
    FleetWorkflow,
    NodeWorkflow,
]

# On task queue `noderoll-global`, by the worker of every named cluster (ADR 0017): no activities.
GLOBAL_WORKFLOWS: list[type] = [
    GlobalRolloutWorkflow,
]

ACTIVITIES: list[Callable[..., Any]] = [
    # node window (activities/nodes.py, drain.py, eviction_notice.py, stage_run.py, interrupts.py, verify_run.py,
    # stage_cleanup.py, window_close.py)
    read_node,
    cordon_node,
    uncordon_node,
    write_node_state,
    wait_protected_pods,
    announce_eviction,
    drain_node,
    run_stage_pod,
    run_interrupt,
    run_verify_pod,
    delete_stage_jobs,
    close_window,
    # fleet (activities/fleet.py, describe.py: the watchdog)
    list_fleet_nodes,
    read_node_supply,
    request_windows,
    describe_workflow_runs,
    # analysis gates of fleets (activities/prometheus.py)
    query_prometheus,
    # fleet and node workflow (activities/node_marks.py)
    mark_blocked_nodes,
    # fleet of a named cluster whose policy has spec.clusters (activities/global_reports.py)
    report_to_global,
    # drain-ahead of fleets (activities/upcoming.py)
    mark_upcoming_nodes,
]
