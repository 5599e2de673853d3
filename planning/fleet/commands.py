"""What the fleet machine asks its driver to do, and what the driver answers. Pure data.

The machine (`planning.fleet.machine`) yields one command at a time. Effects (`Show`, `Log`) are carried
out at once and answered with None; the others are answered with their result (`Command.result` names
its type) once carried out. The fleet workflow (`workflows/fleet.py`) carries them out with Temporal,
`planning.views.simulate` with a simulated fleet. The order of the commands is the order of the
workflow's Temporal commands, which recorded histories replay against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from api.analysis import AnalysisGate
from api.enums import RolloutPhase
from protocol.activities import (
    DescribeWorkflowRunsInput,
    ListFleetNodesInput,
    MarkBlockedNodesInput,
    MarkUpcomingNodesInput,
    ReadNodeSupplyInput,
    ReportToGlobalInput,
)
from protocol.fleet import FleetInput, WindowCancel, WindowRequest


@dataclass(frozen=True)
class Show:
    """Effect: the Temporal UI's details line, and the search attributes `NoderollPhase` / `NoderollPackage`
    when they changed (None: unchanged)."""

    details: str | None = None
    phase: RolloutPhase | None = None
    packages: list[str] | None = None


@dataclass(frozen=True)
class Log:
    """Effect: a line in the worker's log (`warning`: at warning level, else info)."""

    text: str
    warning: bool = False


@dataclass(frozen=True)
class Patched:
    """Answered at once with True when the run takes the path of patch `patch_id` (`workflow.patched`)."""

    patch_id: str


@dataclass(frozen=True)
class HistoryFull:
    """Answered at once with True when the run's history asks for continue-as-new (or passed `limit` events)."""

    limit: int


@dataclass(frozen=True)
class ListNodes:
    """Activity `list_fleet_nodes`: answered with its `ListFleetNodesResult`."""

    input: ListFleetNodesInput


@dataclass(frozen=True)
class ReadSupply:
    """Activity `read_node_supply`: the nodes as floors, topology limits and the count budget see them now;
    answered with its `ReadNodeSupplyResult`, or a `Failed` when it failed for good."""

    input: ReadNodeSupplyInput


@dataclass(frozen=True)
class MarkBlocked:
    """Activity `mark_blocked_nodes` (a failure is logged by the driver): answered with None."""

    input: MarkBlockedNodesInput


@dataclass(frozen=True)
class MarkUpcoming:
    """Activity `mark_upcoming_nodes`: answered with its `MarkUpcomingNodesResult`, or a `Failed`."""

    input: MarkUpcomingNodesInput


@dataclass(frozen=True)
class RequestWindows:
    """Activity `request_windows`, in chunks: hand each node its request (signal-with-start). Answered with None."""

    requests: list[WindowRequest]
    nodes: list[str]


@dataclass(frozen=True)
class Withdraw:
    """Signal `window_cancel` to each node workflow, in order (an undelivered one is logged). Answered with None."""

    cancels: list[tuple[str, WindowCancel]] = field(default_factory=list)


@dataclass(frozen=True)
class DescribeRuns:
    """Activity `describe_workflow_runs`: answered with its `DescribeWorkflowRunsResult`."""

    input: DescribeWorkflowRunsInput


@dataclass(frozen=True)
class QueryGate:
    """Activity `query_prometheus` for one analysis gate: answered with a `GateSample`."""

    gate: AnalysisGate


@dataclass(frozen=True)
class ReportToGlobal:
    """Activity `report_to_global`. Answered with None."""

    input: ReportToGlobalInput
    what: str


@dataclass(frozen=True)
class Wait:
    """Wait for a message in the inbox, or `timeout` (None: no timeout). Answered with True when a
    message came, False when the timeout passed."""

    timeout: timedelta | None


@dataclass(frozen=True)
class WaitHandlers:
    """Wait until every signal handler finished (before ending or continuing as new). Answered with None."""


@dataclass(frozen=True)
class ContinueAsNew:
    """End this run; the next one starts with `input` (the fleet's state carried)."""

    input: FleetInput


@dataclass(frozen=True)
class Complete:
    """End the fleet: no Package is left and no window is out."""


@dataclass(frozen=True)
class Failed:
    """An activity failed for good: why."""

    reason: str


@dataclass(frozen=True)
class GateSample:
    """The answer of `query_prometheus`: its result, or why it could not be evaluated."""

    result: object | None = None
    error: str = ""


Command = (Show | Log | Patched | HistoryFull | ListNodes | ReadSupply | MarkBlocked | MarkUpcoming
           | RequestWindows | Withdraw | DescribeRuns | QueryGate | ReportToGlobal | Wait | WaitHandlers
           | ContinueAsNew | Complete)
# Commands answered at once, without a Temporal command of their own.
IMMEDIATE = (Show, Log, Patched, HistoryFull)
