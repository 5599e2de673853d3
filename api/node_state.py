"""The `noderoll.io/state` node annotation: what each package has done on one node. Pure (no I/O).

Schema (docs/architecture.md): `{"packages": {"<name>": {"version", "image", "stage", "state",
"attempts", "lastError", "config": {key: sha256}, "updatedAt", "action", "targetConfig"}},
"verifyFailed": {"packages", "message", "image", "window", "updatedAt"}}`, one entry per package
name (the version installed or being installed); `verifyFailed` only while the node's last GPU
verify failed (`spec.verify`, api/verify.py). The node workflow is the only writer. Garbage in the
annotation (not JSON, not an object, not the schema) is never a crash: `parse_node_state` returns an
empty state and the problem, and every reader treats such a node as *held* (`held_reason`): nothing
runs on it and nothing overwrites the annotation until an operator removes or repairs it (condition
`noderoll.io/StateMalformed`, docs/operations.md). Unknown fields are ignored, so an older noderoll
can read a newer annotation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from pydantic import Field, ValidationError

from api.base import LenientModel
from api.enums import PlanAction, Stage, State
from api.keys import NODE_STATE_ANNOTATION


class PackageNodeState(LenientModel):
    """One package's record on one node."""

    version: str
    image: str = ""
    stage: Stage | None = None
    state: State = State.WAITING
    attempts: int = 0
    last_error: str | None = None
    # Config key -> sha256 of its content, as last applied (drives config-only changes).
    config: dict[str, str] = Field(default_factory=dict)
    updated_at: str | None = None
    # The operation in progress (written when it starts), so a resumed plan continues the same
    # sequence; None for entries written without it (then a complete entry counts as finished).
    action: PlanAction | None = None
    # Config key -> sha256 of the config the recorded operation applies: written when it starts,
    # dropped when it finishes (then `config` holds it). A resumed operation past its config stage
    # runs that stage again when the desired config is not this one. None when unknown.
    target_config: dict[str, str] | None = None

    def is_complete(self) -> bool:
        """True when the recorded operation finished."""
        return self.state is State.COMPLETE


class VerifyFailed(LenientModel):
    """The node's last GPU verify failed (`spec.verify`): its window's Packages completed on the host,
    and the node waits for a verify that passes (api/verify.py)."""

    # The Packages of the windows whose verify failed (they run again on `retry`).
    packages: list[str] = Field(default_factory=list)
    message: str = ""
    image: str = ""
    # The window that ran the verify (its pod names derive from it).
    window: str = ""
    updated_at: str | None = None


class NodeState(LenientModel):
    """Every package recorded on one node (and, while it stands, the node's failed GPU verify)."""

    packages: dict[str, PackageNodeState] = Field(default_factory=dict)
    # None (absent from the annotation) unless the last verify failed.
    verify_failed: VerifyFailed | None = None


def parse_node_state(raw: str | None) -> tuple[NodeState, str | None]:
    """Read the annotation; on garbage return an empty state and a message saying what is wrong."""
    if raw is None or raw.strip() == "":
        return NodeState(), None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        return NodeState(), f"not JSON ({err.msg} at position {err.pos})"
    if not isinstance(data, dict):
        return NodeState(), "not a JSON object"
    try:
        return NodeState.model_validate(data), None
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        return NodeState(), f"does not match the schema ({where}: {first['msg']})"


def held_reason(problem: str) -> str:
    """Why a node whose annotation cannot be read is held (Package status, node condition, Event)."""
    return (
        f"{NODE_STATE_ANNOTATION} unreadable: {problem}; node held (nothing runs, the annotation is kept) "
        "until it is removed or repaired"
    )


def dump_node_state(state: NodeState) -> str:
    """Serialize for the annotation: compact, keys sorted, so equal states give equal strings."""
    data = state.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def config_hashes(config: Mapping[str, str]) -> dict[str, str]:
    """sha256 of every config value, as recorded in the node state after a stage applies them."""
    return {key: hashlib.sha256(value.encode()).hexdigest() for key, value in config.items()}


def changed_config_keys(recorded: Mapping[str, str], desired: Mapping[str, str]) -> list[str]:
    """Keys whose content differs between recorded hashes and desired content: added, changed or removed."""
    wanted = config_hashes(desired)
    keys = set(recorded) | set(wanted)
    return sorted(k for k in keys if recorded.get(k) != wanted.get(k))
