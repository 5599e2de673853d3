"""A drain that waits, as reported (planning/node/drain.py) and rendered (Package status, the ops CLI)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from api.enums import DrainReason, RolloutPhase, Stage, State
from api.keys import CONDITION_DRAINING, NODE_STATE_ANNOTATION
from api.node_state import PackageNodeState
from cli.ops_client import NodeRow, PackageView
from cli.ops_client import drain_blocks as view_blocks
from cli.progress_view import (
    nodes_json,
    nodes_table,
    package_detail,
    progress_json,
)
from demo.view import LiveSnapshot, change_lines
from planning.node.drain import (
    DrainBlock,
    DrainCondition,
    DrainNotice,
    PdbView,
    drain_blocks,
    drains_window,
    eviction_refused_message,
    pdb_view,
    protected_pods_message,
    read_drain_condition,
)
from planning.views.status import RolloutProgress, render_package_status

WINDOW_START = "2026-01-01T10:00:00.500000+00:00"
REFUSED = "eviction refused for pod(s) web/web-0 by PodDisruptionBudget(s): web/web (disruptionsAllowed=0, ...)"


def _text(renderable: object) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=250, color_system=None).print(renderable)
    return buffer.getvalue()


def _entry(state: State = State.IN_PROGRESS, updated_at: str = WINDOW_START) -> PackageNodeState:
    return PackageNodeState(version="1.0.0", stage=Stage.APPLY, state=state, updated_at=updated_at)


def _condition(reason: DrainReason = DrainReason.EVICTION_REFUSED, since: str = "2026-01-01T10:00:03Z",
               draining: bool = True) -> DrainCondition:
    return DrainCondition(draining=draining, reason=reason.value, message=REFUSED, since=since)


def test_a_drain_is_blocked_only_after_refusals_in_a_row() -> None:
    notice = DrainNotice(blocked_after_seconds=15)
    assert not notice.eviction_round(0.0, refused=True)
    assert not notice.eviction_round(14.0, refused=True)
    assert notice.eviction_round(15.0, refused=True)
    assert not notice.eviction_round(16.0, refused=False)  # one accepted round starts over
    assert not notice.eviction_round(20.0, refused=True)
    assert notice.eviction_round(35.0, refused=True)


def test_a_wait_is_written_when_it_changes_or_grows_old() -> None:
    notice = DrainNotice(refresh_seconds=60)
    assert not notice.active and notice.due(0.0, DrainReason.EVICTING, "evicting 2 pod(s)")
    notice.written(0.0, DrainReason.EVICTING, "evicting 2 pod(s)")
    assert notice.active
    assert not notice.due(10.0, DrainReason.EVICTING, "evicting 2 pod(s)")
    assert notice.due(10.0, DrainReason.EVICTION_REFUSED, REFUSED)
    notice.written(10.0, DrainReason.EVICTION_REFUSED, REFUSED)
    assert not notice.due(69.0, DrainReason.EVICTION_REFUSED, REFUSED)
    assert notice.due(70.0, DrainReason.EVICTION_REFUSED, REFUSED)  # the Event's count and time


def test_messages_name_pods_and_budgets_with_allowed_disruptions() -> None:
    pdb = pdb_view({"metadata": {"namespace": "web", "name": "web"},
                    "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 2, "expectedPods": 2}})
    assert pdb == PdbView("web/web", 0, 1, 2, 2)
    message = eviction_refused_message(["web/web-1", "web/web-0"], [pdb])
    assert message == ("eviction refused for pod(s) web/web-0, web/web-1 by PodDisruptionBudget(s): web/web "
                       "(disruptionsAllowed=0, currentHealthy=1, desiredHealthy=2, expectedPods=2)")
    assert "no PodDisruptionBudget found" in eviction_refused_message(["a/b"], [])
    many = protected_pods_message([f"ml/train-{i:02d}" for i in range(12)])
    assert many.startswith("waiting for protected pod(s) to finish: ml/train-00,") and many.endswith("and 2 more")


def test_the_condition_is_read_from_node_conditions() -> None:
    conditions = [{"type": "Ready", "status": "True"},
                  {"type": CONDITION_DRAINING, "status": "True", "reason": "EvictionRefused", "message": REFUSED,
                   "lastTransitionTime": "2026-01-01T10:00:03Z"}]
    assert read_drain_condition(conditions) == _condition()
    assert read_drain_condition(conditions[:1]) is None
    assert _condition().blocked
    assert not _condition(DrainReason.EVICTING).blocked
    assert _condition(DrainReason.WAITING_FOR_PROTECTED_PODS).blocked
    assert not _condition(DrainReason.DRAINED, draining=False).blocked


@pytest.mark.parametrize(
    ("condition", "entry", "belongs"),
    [
        pytest.param(_condition(), _entry(), True, id="drain-of-this-window"),
        pytest.param(_condition(since="2026-01-01T09:59:58Z"), _entry(), True, id="clocks-differ-a-little"),
        pytest.param(_condition(since="2026-01-01T09:00:00Z"), _entry(), False, id="left-by-a-window-cut-off"),
        pytest.param(_condition(), _entry(State.COMPLETE), False, id="package-not-in-a-window"),
        pytest.param(_condition(draining=False), _entry(), False, id="drain-ended"),
        pytest.param(_condition(since="not a time"), _entry(), True, id="unreadable-time-shows-it"),
        pytest.param(None, _entry(), False, id="never-drained"),
    ],
)
def test_a_drain_belongs_to_the_window_of_in_progress_entries(
    condition: DrainCondition | None, entry: PackageNodeState, belongs: bool,
) -> None:
    assert drains_window(condition, entry) is belongs


def _node_json(name: str, conditions: list[dict[str, Any]], packages: dict[str, Any]) -> dict[str, Any]:
    state = json.dumps({"packages": packages})
    return {"metadata": {"name": name, "annotations": {NODE_STATE_ANNOTATION: state}},
            "status": {"conditions": conditions}}


def test_drain_blocks_of_a_package_among_node_objects() -> None:
    blocked = {"type": CONDITION_DRAINING, "status": "True", "reason": "EvictionRefused", "message": REFUSED,
               "lastTransitionTime": "2026-01-01T10:00:03Z"}
    evicting = {**blocked, "reason": "Evicting", "message": "evicting 3 pod(s)"}
    window = {"version": "1.0.0", "stage": "apply", "state": "in_progress", "updatedAt": WINDOW_START}
    done = {**window, "state": "complete"}
    nodes = [
        _node_json("n2", [blocked], {"pkg": window, "other": done}),
        _node_json("n1", [blocked], {"pkg": window}),
        _node_json("n3", [evicting], {"pkg": window}),
        _node_json("n4", [], {"pkg": window}),
    ]
    blocks = drain_blocks("pkg", nodes)
    assert blocks == [DrainBlock("n1", "EvictionRefused", REFUSED, "2026-01-01T10:00:03Z"),
                      DrainBlock("n2", "EvictionRefused", REFUSED, "2026-01-01T10:00:03Z")]
    assert drain_blocks("other", nodes) == []


def test_package_status_lists_drain_blocked_nodes_and_progressing_names_them() -> None:
    progress = RolloutProgress(phase=RolloutPhase.PROGRESSING, version="1.0.0", total_nodes=2,
                               counts={"in_progress": 1, "complete": 1}, updated_at="2026-01-01T10:01:00Z")
    block = DrainBlock("n1", "EvictionRefused", REFUSED, "2026-01-01T10:00:03Z")
    status = render_package_status(progress, 4, None, [block])
    assert status["drainBlockedNodes"] == [{"node": "n1", "reason": "EvictionRefused", "message": REFUSED,
                                            "since": "2026-01-01T10:00:03Z"}]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Progressing"]["status"] == "True"
    assert f"drain blocked on 1 node(s): n1 (EvictionRefused: {REFUSED})" in conditions["Progressing"]["message"]
    assert conditions["Degraded"]["status"] == "False"  # it waits within its bounds
    assert render_package_status(progress, 4)["drainBlockedNodes"] == []  # written empty: clears the last


def _view(name: str, entry: PackageNodeState, drain: DrainCondition | None) -> NodeRow:
    return NodeRow(name=name, status="in-progress", ready=True, cordoned=True, cordoned_by_noderoll=True,
                    packages={"pkg": entry}, drain=drain)


def test_cli_shows_the_window_at_stage_drain_with_its_blocker() -> None:
    nodes = [_view("n-0", _entry(), _condition()),
             _view("n-1", _entry(), _condition(DrainReason.EVICTING)),
             _view("n-2", _entry(), None)]
    text = _text(nodes_table(nodes))
    n0, n1, n2 = (line for line in text.splitlines() if line.startswith("│ n-"))
    assert "drain" in n0 and "blocked" in n0 and "disruptionsAllowed=0" in n0
    assert "drain" in n1 and "in_progress" in n1
    assert "apply" in n2 and "in_progress" in n2
    data = nodes_json(nodes)
    assert data[0]["shown"]["pkg"] == {"stage": "drain", "state": "blocked", "message": REFUSED}
    assert data[0]["packages"]["pkg"]["stage"] == "apply"  # the record itself is unchanged
    assert data[0]["drain"]["reason"] == "EvictionRefused"
    assert view_blocks("pkg", nodes) == [DrainBlock("n-0", "EvictionRefused", REFUSED, "2026-01-01T10:00:03Z")]


def test_status_detail_and_json_show_drain_blocked_nodes() -> None:
    view = PackageView("pkg", RolloutProgress(phase=RolloutPhase.PROGRESSING), "temporal query",
                       drain_blocked=[DrainBlock("n-0", "EvictionRefused", REFUSED, "2026-01-01T10:00:03Z")])
    detail = _text(package_detail(view))
    assert "drain blocked" in detail and "n-0" in detail and "disruptionsAllowed=0" in detail
    assert progress_json(view)["drain_blocked"][0]["node"] == "n-0"


def test_demo_change_lines_show_a_blocked_drain() -> None:
    progress = {"pkg": RolloutProgress(phase=RolloutPhase.PROGRESSING, batch_number=1)}
    before = LiveSnapshot(packages=progress, nodes=[_view("n-0", _entry(), _condition(DrainReason.EVICTING))],
                          elapsed=1.0)
    after = LiveSnapshot(packages=progress, nodes=[_view("n-0", _entry(), _condition())], elapsed=2.0)
    assert change_lines(before, after) == [f"[   2.0s] n-0 pkg: blocked (drain): {REFUSED}"]
