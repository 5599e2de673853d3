"""Every activity the workflows call, by reference: its name, input and result type, in one place. Pure data.

An activity registers under its reference's name (`@activity.defn(name=LIST_FLEET_NODES.name)`), and a
workflow calls it through the same reference (`workflow.execute_activity(LIST_FLEET_NODES.name, input,
result_type=LIST_FLEET_NODES.result, ...)`), so no name is written at both ends: a renamed activity is one
edit here, and `tests/unit/test_activity_names.py` fails on a call or a registration by a literal name.
"""

from dataclasses import dataclass
from typing import Any

from protocol.activities import (
    DescribeWorkflowRunsInput,
    DescribeWorkflowRunsResult,
    ListFleetNodesInput,
    ListFleetNodesResult,
    MarkBlockedNodesInput,
    MarkBlockedNodesResult,
    MarkUpcomingNodesInput,
    MarkUpcomingNodesResult,
    QueryPrometheusInput,
    QueryPrometheusResult,
    ReadNodeSupplyInput,
    ReadNodeSupplyResult,
    ReportToGlobalInput,
    RequestWindowsInput,
)
from protocol.node_activities import (
    AnnounceEvictionInput,
    AnnounceEvictionResult,
    CloseWindowInput,
    CloseWindowResult,
    CordonNodeResult,
    DeleteStageJobsInput,
    DeleteStageJobsResult,
    DrainNodeInput,
    DrainNodeResult,
    NodeInput,
    ReadNodeResult,
    RunInterruptInput,
    RunInterruptResult,
    RunStagePodInput,
    RunStagePodResult,
    RunVerifyPodInput,
    RunVerifyPodResult,
    UncordonNodeResult,
    WaitProtectedPodsInput,
    WaitProtectedPodsResult,
    WriteNodeStateInput,
)


@dataclass(frozen=True)
class ActivityRef:
    """One activity: the name it is registered and called by, its input and its result type (None: none)."""

    name: str
    input: type[Any]
    result: Any = None


# The fleet's (planning/fleet/commands.py says when each is called).
LIST_FLEET_NODES = ActivityRef("list_fleet_nodes", ListFleetNodesInput, ListFleetNodesResult)
READ_NODE_SUPPLY = ActivityRef("read_node_supply", ReadNodeSupplyInput, ReadNodeSupplyResult)
REQUEST_WINDOWS = ActivityRef("request_windows", RequestWindowsInput)
DESCRIBE_WORKFLOW_RUNS = ActivityRef("describe_workflow_runs", DescribeWorkflowRunsInput, DescribeWorkflowRunsResult)
QUERY_PROMETHEUS = ActivityRef("query_prometheus", QueryPrometheusInput, QueryPrometheusResult)
MARK_UPCOMING_NODES = ActivityRef("mark_upcoming_nodes", MarkUpcomingNodesInput, MarkUpcomingNodesResult)
REPORT_TO_GLOBAL = ActivityRef("report_to_global", ReportToGlobalInput)
# The fleet's and the node workflow's.
MARK_BLOCKED_NODES = ActivityRef("mark_blocked_nodes", MarkBlockedNodesInput, MarkBlockedNodesResult)
# The node workflow's and its window's.
READ_NODE = ActivityRef("read_node", NodeInput, ReadNodeResult)
WRITE_NODE_STATE = ActivityRef("write_node_state", WriteNodeStateInput, ReadNodeResult)
CORDON_NODE = ActivityRef("cordon_node", NodeInput, CordonNodeResult)
UNCORDON_NODE = ActivityRef("uncordon_node", NodeInput, UncordonNodeResult)
WAIT_PROTECTED_PODS = ActivityRef("wait_protected_pods", WaitProtectedPodsInput, WaitProtectedPodsResult)
ANNOUNCE_EVICTION = ActivityRef("announce_eviction", AnnounceEvictionInput, AnnounceEvictionResult)
DRAIN_NODE = ActivityRef("drain_node", DrainNodeInput, DrainNodeResult)
RUN_STAGE_POD = ActivityRef("run_stage_pod", RunStagePodInput, RunStagePodResult)
RUN_INTERRUPT = ActivityRef("run_interrupt", RunInterruptInput, RunInterruptResult)
RUN_VERIFY_POD = ActivityRef("run_verify_pod", RunVerifyPodInput, RunVerifyPodResult)
DELETE_STAGE_JOBS = ActivityRef("delete_stage_jobs", DeleteStageJobsInput, DeleteStageJobsResult)
CLOSE_WINDOW = ActivityRef("close_window", CloseWindowInput, CloseWindowResult)

EVERY = (LIST_FLEET_NODES, READ_NODE_SUPPLY, REQUEST_WINDOWS, DESCRIBE_WORKFLOW_RUNS, QUERY_PROMETHEUS,
         MARK_UPCOMING_NODES, REPORT_TO_GLOBAL, MARK_BLOCKED_NODES, READ_NODE, WRITE_NODE_STATE, CORDON_NODE,
         UNCORDON_NODE, WAIT_PROTECTED_PODS, ANNOUNCE_EVICTION, DRAIN_NODE, RUN_STAGE_POD, RUN_INTERRUPT,
         RUN_VERIFY_POD, DELETE_STAGE_JOBS, CLOSE_WINDOW)
