"""JSON conversion of the fleet's state, its listings and its `progress` answer. Deterministic, no I/O.

The wire form of the fleet's data, in one place for both ends: the fleet carries its `FleetState`
through continue-as-new, and receives its listings, as JSON (a typed payload would make the
workflow sandbox resolve planning's (string) annotations, which it cannot); the clients (the bridge,
the CLI, the demo, the SDK example, the benchmarks) read the `progress` answer with
`progress_from_json`, without importing a workflow module (import contract `clients-no-execution`).
The types are planning's, so this module and `protocol.global_codec` are the two modules of
`protocol` that import `planning` (`.importlinter`: the only exceptions to `protocol-leaf`).
The adapters are built when this module is first imported, by the worker outside the sandbox; the
sandbox reuses them (the workflows import it passed through).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter

from planning.fleet_state import FleetState
from planning.fleet_status import FleetProgress
from planning.fleet_targets import FleetSelection
from planning.node_marks import NodeMark

_STATE = TypeAdapter(FleetState)
_SELECTION = TypeAdapter(FleetSelection)
_PROGRESS = TypeAdapter(FleetProgress)
_MARKS = TypeAdapter(list[NodeMark])


def state_to_json(state: FleetState) -> dict[str, Any]:
    """`state` as JSON-able data (for continue-as-new)."""
    return _STATE.dump_python(state, mode="json")


def state_from_json(data: dict[str, Any]) -> FleetState:
    """The `FleetState` stored by `state_to_json`."""
    return _STATE.validate_python(data)


def selection_from_json(data: dict[str, Any]) -> FleetSelection:
    """The `FleetSelection` a `list_fleet_nodes` activity returned."""
    return _SELECTION.validate_python(data)


def progress_from_json(data: Any) -> FleetProgress:
    """A `progress` query answer as a `FleetProgress` (for clients: the bridge, the CLI, the demo)."""
    return _PROGRESS.validate_python(data)


def marks_from_json(data: list[Any]) -> list[NodeMark]:
    """The `NodeMark`s a `list_fleet_nodes` activity returned."""
    return _MARKS.validate_python(data)


def marks_to_json(marks: Sequence[NodeMark]) -> list[dict[str, Any]]:
    """`marks` as the JSON `mark_blocked_nodes` takes (`protocol.activities.MarkBlockedNodesInput`)."""
    return _MARKS.dump_python(list(marks), mode="json")
