"""Inputs and results of every activity, as plain dataclasses (no Kubernetes import).

Workflows import this module (inside `imports_passed_through`) and call activities by name, so the
workflow sandbox never loads the Kubernetes client (import contract `workflows-no-io`).
Each activity owner adds its `<Verb><Noun>Input` / `...Result` classes here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflows.messages import NodeCancel, NodeRequest


# --- rollout, budget and bridge activities (activities/targets.py, describe.py, node_requests.py) ---


@dataclass
class DescribeWorkflowRunsInput:
    """Workflow ids whose latest run should be checked."""

    workflow_ids: list[str]


@dataclass
class DescribeWorkflowRunsResult:
    """The ids (of the input) whose latest run is closed or that do not exist."""

    closed: list[str] = field(default_factory=list)


@dataclass
class ListTargetNodesInput:
    """List Nodes (optionally narrowed server-side by a label selector string) as snapshots."""

    label_selector: str = ""


@dataclass
class NodeSnapshot:
    """What target selection and batch planning need to know about one Node (observed once)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    # Each taint as {"key", "value", "effect"}.
    taints: list[dict[str, str]] = field(default_factory=list)
    created: str = ""
    # The raw `noderoll.io/state` annotation ("" when absent); parsed by the pure core.
    state_annotation: str = ""


@dataclass
class ListTargetNodesResult:
    """Every Node matching the input, sorted by name."""

    nodes: list[NodeSnapshot] = field(default_factory=list)


@dataclass
class RequestNodeWindowInput:
    """Hand `request` to `node/<node>` by signal-with-start (starting the node workflow if needed)."""

    node: str
    request: NodeRequest
    task_queue: str = ""


@dataclass
class CancelNodeRequestInput:
    """Withdraw a rollout's pending request on `node/<node>` (halt)."""

    node: str
    cancel: NodeCancel
