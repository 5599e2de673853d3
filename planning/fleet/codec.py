"""JSON conversion of what the fleet machine carries and receives: its state (continue-as-new), listings and
marks (activity results). Pure.

A typed Temporal payload would make the workflow sandbox resolve planning's (string) annotations, which it
cannot; so the fleet's state and its listings travel as JSON, converted here with pydantic adapters built
once, when this module is first imported (by the worker, outside the sandbox; the sandbox reuses them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter

from planning.fleet import carry
from planning.node.node_marks import NodeMark
from planning.rollout.fleet_state import FleetState
from planning.rollout.fleet_targets import FleetSelection
from planning.views.fleet_status import FleetProgress

_STATE = TypeAdapter(FleetState)
_SELECTION = TypeAdapter(FleetSelection)
_PROGRESS = TypeAdapter(FleetProgress)
_MARKS = TypeAdapter(list[NodeMark])


def state_to_json(state: FleetState) -> dict[str, Any]:
    """`state` as JSON-able data for continue-as-new, compact at any fleet size (`planning.fleet.carry`)."""
    return carry.pack(_STATE.dump_python(state, mode="json"))


def state_from_json(data: dict[str, Any]) -> FleetState:
    """The `FleetState` stored by `state_to_json` (or as carried before it: the whole state as JSON)."""
    return _STATE.validate_python(carry.unpack(data))


def selection_from_json(data: dict[str, Any]) -> FleetSelection:
    """The `FleetSelection` a `list_fleet_nodes` activity returned (packed, or plain before issue 45)."""
    return _SELECTION.validate_python(carry.unpack_selection(data))


def selection_to_json(selection: FleetSelection) -> dict[str, Any]:
    """`selection` as `list_fleet_nodes` returns it: defaults left out, packed (`planning.fleet.carry`)."""
    return carry.pack_selection(_SELECTION.dump_python(selection, mode="json", exclude_defaults=True))


def progress_from_json(data: Any) -> FleetProgress:
    """A `progress` query answer as a `FleetProgress` (for clients: the bridge, the CLI, the demo)."""
    return _PROGRESS.validate_python(data)


def marks_from_json(data: list[Any]) -> list[NodeMark]:
    """The `NodeMark`s a `list_fleet_nodes` activity returned."""
    return _MARKS.validate_python(data)


def marks_to_json(marks: Sequence[NodeMark]) -> list[dict[str, Any]]:
    """`marks` as the JSON `mark_blocked_nodes` takes (`protocol.activities.MarkBlockedNodesInput`)."""
    return _MARKS.dump_python(list(marks), mode="json")
