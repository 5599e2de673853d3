"""What reaches a fleet from outside: the messages its signal handlers queue. Pure data.

The workflow's handlers only queue these (`planning.fleet.run.FleetRun.receive`); the machine applies them
in arrival order at the points where it takes its inbox (`planning.fleet.inbox.apply_inbox`).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.clusters import GlobalTurn
from protocol.fleet import Filter, FleetSpec, Rerun, WindowResult


@dataclass(frozen=True)
class Desired:
    """The bridge's new desired state."""

    spec: FleetSpec


@dataclass(frozen=True)
class Operator:
    """An operator signal (`pause`, `resume`, `halt`, `retry`) and its filter."""

    signal: str
    scope: Filter


@dataclass(frozen=True)
class NodesChanged:
    """The bridge saw Node changes that concern the fleet's targets (a re-list is wanted)."""


@dataclass(frozen=True)
class AvailabilityChanged:
    """The bridge saw nodes of the fleet cordoned or uncordoned by someone else, or turn NotReady or Ready."""

    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    """A node workflow's answer."""

    result: WindowResult


@dataclass(frozen=True)
class RerunAsked:
    """`rerun` (or the Package's `noderoll.io/rerun` annotation): run a complete Package again."""

    request: Rerun


@dataclass(frozen=True)
class TurnGiven:
    """`global/<policy>`'s answer (its turn for a change set, the global view; ADR 0017)."""

    turn: GlobalTurn


Message = Desired | Operator | NodesChanged | AvailabilityChanged | Answer | RerunAsked | TurnGiven
