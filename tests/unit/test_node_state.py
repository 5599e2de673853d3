"""The `noderoll.io/state` annotation (api/node_state.py): parse, dump, garbage tolerance, config hashes."""

from __future__ import annotations

import json

import pytest

from api.enums import PlanAction, Stage, State
from api.node_state import (
    NodeState,
    PackageNodeState,
    changed_config_keys,
    config_hashes,
    dump_node_state,
    held_reason,
    parse_node_state,
)


def test_round_trip_uses_contract_field_names() -> None:
    state = NodeState(
        packages={
            "a": PackageNodeState(
                version="1.0.0",
                image="x/a:1.0.0",
                stage=Stage.POST_INTERRUPT,
                state=State.COMPLETE,
                attempts=2,
                last_error="boom",
                config=config_hashes({"k": "v"}),
                updated_at="2026-01-01T00:00:00Z",
                action=PlanAction.INSTALL,
            )
        }
    )
    raw = dump_node_state(state)
    entry = json.loads(raw)["packages"]["a"]
    assert set(entry) == {
        "version",
        "image",
        "stage",
        "state",
        "attempts",
        "lastError",
        "config",
        "updatedAt",
        "action",
    }
    assert entry["stage"] == "post-interrupt" and entry["state"] == "complete"
    assert parse_node_state(raw) == (state, None)


@pytest.mark.parametrize("raw", [None, "", "  "])
def test_nothing_recorded(raw: str | None) -> None:
    assert parse_node_state(raw) == (NodeState(), None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"packages": {"a": {"state": "complete"}}}', "packages.a.version"),
        ('{"packages": {"a": {"version": "1", "stage": "dance"}}}', "packages.a.stage"),
    ],
)
def test_garbage_is_reported_not_raised(raw: str, message: str) -> None:
    state, error = parse_node_state(raw)
    assert state == NodeState()
    assert error is not None and message in error
    # Whoever reads it holds the node and says why, naming the annotation.
    reason = held_reason(error)
    assert reason.startswith("noderoll.io/state unreadable: ") and message in reason and "held" in reason


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    state, error = parse_node_state('{"packages": {"a": {"version": "1", "future": 1}}, "other": 2}')
    assert error is None and state.packages["a"].version == "1"


def test_dump_is_canonical() -> None:
    a = NodeState(packages={"b": PackageNodeState(version="1"), "a": PackageNodeState(version="2")})
    b = NodeState(packages={"a": PackageNodeState(version="2"), "b": PackageNodeState(version="1")})
    assert dump_node_state(a) == dump_node_state(b)


def test_changed_config_keys_cover_added_changed_removed() -> None:
    recorded = config_hashes({"same": "1", "changed": "1", "removed": "1"})
    assert changed_config_keys(recorded, {"same": "1", "changed": "2", "added": "1"}) == [
        "added",
        "changed",
        "removed",
    ]
    assert changed_config_keys(recorded, {"same": "1", "changed": "1", "removed": "1"}) == []
