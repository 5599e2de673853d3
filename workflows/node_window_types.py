"""The data of one node window: its context, a package's failure, the window's outcome. Deterministic.

Split from `workflows/node_window.py` (which sequences the window) to keep each module one concept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio.exceptions import ActivityError, ApplicationError

from activities.io import ReadNodeResult
from api.node_state import NodeState
from api.package import PackageSpec
from planning.node_plan import NodePlan, NodeWindow
from protocol import errors
from workflows.messages import NodeRequest, NodeResult, NodeWorkflowInput


@dataclass
class WindowContext:
    """Everything one window needs; `grants` is the workflow's live set of granted lease ids."""

    settings: NodeWorkflowInput
    key: str
    snapshot: ReadNodeResult
    recorded: NodeState
    plan: NodePlan
    window: NodeWindow
    requests: dict[str, NodeRequest]
    specs: dict[str, PackageSpec]
    grants: set[str]
    set_phase: Callable[[str], None]


@dataclass
class Failure:
    """Why a package ended erroring in this window."""

    stage: str
    message: str
    log: str = ""


@dataclass
class WindowOutcome:
    """What the window did: one result per package, and whether the node was left cordoned."""

    results: dict[str, NodeResult] = field(default_factory=dict)
    left_cordoned: bool = False
    # The node was deleted during the window: nothing to hold for a retry.
    node_gone: bool = False


def cause(err: ActivityError) -> str:
    """The failure of an activity as one line: `<type>: <message>` for application errors."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or err)


def node_gone(err: ActivityError) -> bool:
    """True when the activity failed because the node does not exist (any more)."""
    return isinstance(err.cause, ApplicationError) and err.cause.type == errors.NODE_NOT_FOUND
