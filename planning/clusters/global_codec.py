"""JSON conversion of `global/<policy>`'s state and answers. Pure.

As for the fleet (`planning/fleet/codec.py`): the state travels through continue-as-new as JSON,
the clients (`noderoll status --global`) read the answer without importing a workflow module, and
the adapters are built when the worker first imports this module, outside the sandbox.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from planning.clusters.global_rollout import GlobalState
from protocol.clusters import GlobalView

_STATE = TypeAdapter(GlobalState)
_VIEW = TypeAdapter(GlobalView)


def global_state_to_json(state: GlobalState) -> dict[str, Any]:
    """`state` as JSON-able data (for continue-as-new)."""
    return _STATE.dump_python(state, mode="json")


def global_state_from_json(data: dict[str, Any]) -> GlobalState:
    """The `GlobalState` stored by `global_state_to_json`."""
    return _STATE.validate_python(data)


def global_view_from_json(data: Any) -> GlobalView:
    """A `progress` answer of `global/<policy>` as a `GlobalView` (for clients: the CLI)."""
    return _VIEW.validate_python(data)


def global_view_to_json(view: GlobalView) -> dict[str, Any]:
    """`view` as JSON-able data (for `noderoll status --global --json`)."""
    return _VIEW.dump_python(view, mode="json")
