"""A node its window gave up (`spec.workloads.onDrainTimeout: Skip`) as the fleet and its reports see it:
neither success nor failure, not asked again when the node changes, asked again on `retry`, shown in the
Package status and `noderoll status`; and the policy's `spec.workloads` carried by every request. Pure."""

from __future__ import annotations

import dataclasses
import io
from datetime import UTC, datetime

from rich.console import Console

from api.enums import RolloutPhase, State
from api.keys import NODE_STATUS_LABEL, SKIPPED_LABEL
from cli.fleet_summary import skipped_text
from cli.ops_client import PackageView, progress_from_status
from cli.progress_view import package_detail
from crd_bridge.node_changes import targeting_change
from planning.node.drain_rules import SKIPPED_DRAIN_TIMEOUT
from planning.node.targets import NodeView
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_state import FleetState, InFlight
from planning.rollout.fleet_targets import fingerprint
from planning.views.fleet_status import NodeProgress, fleet_progress
from planning.views.status import SKIPPED_SHOWN, RolloutProgress, render_package_status
from protocol.fleet import Filter, FleetSpec, WindowResult
from tests.unit.fleet_builders import (
    a_fleet_spec,
    a_policy,
    a_result,
    a_selection,
    an_entry,
    every_node,
    everywhere,
    targets,
)

FLEET = "fleet/gpu"
NOW = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
WORKLOADS = {"noticeSeconds": 60, "rules": [{"gpuPods": True, "action": "Leave"}], "onDrainTimeout": "Skip"}
WHY = "drain timed out, node skipped (onDrainTimeout: Skip; noderoll retry --nodes n1): DrainTimeout: ..."


def in_wave(spec: FleetSpec, nodes: list[str]) -> FleetState:
    state = FleetState()
    fs.set_spec(state, spec)
    fs.start_wave(state, everywhere(nodes, [e.name for e in spec.packages]), a_policy(), FLEET)
    return state


def skipped(node: str, request_id: str, *packages: str) -> WindowResult:
    result = a_result(node, request_id, cordoned=True, **dict.fromkeys(packages, State.BLOCKED.value))
    for outcome in result.outcomes.values():
        outcome.message = WHY
    return dataclasses.replace(result, skipped=SKIPPED_DRAIN_TIMEOUT)


def test_every_request_carries_the_policys_workloads() -> None:
    state = in_wave(a_fleet_spec(an_entry("a"), policy={"default": {"budget": {"count": 2}}, "workloads": WORKLOADS}),
                    ["n1", "n2"])
    handed = fs.hand_out(state, FLEET, ["n1", "n2"], NOW)
    assert [request.workloads for _node, request in handed] == [WORKLOADS, WORKLOADS]
    plain = in_wave(a_fleet_spec(an_entry("a"), policy={"default": {"budget": {"count": 2}}}), ["n1"])
    assert [request.workloads for _node, request in fs.hand_out(plain, FLEET, ["n1"], NOW)] == [None]


def test_a_rollback_window_asks_for_no_verify() -> None:
    """The verify may be what failed: a rollback's window takes the change off without it (the failure
    stays recorded on the node); every other window carries the policy's `spec.verify`."""
    verify = {"image": "example/verify:1", "timeoutSeconds": 60, "onFailure": "Uncordon"}
    state = in_wave(a_fleet_spec(an_entry("a"), policy={"default": {"budget": {"count": 2}}, "verify": verify}),
                    ["n1", "n2"])
    assert [request.verify for _node, request in fs.hand_out(state, FLEET, ["n1"], NOW)] == [verify]
    state.in_flight["n2"] = InFlight("r-rollback", ["a"], NOW, rollback=True)
    assert fs.window_request(state, FLEET, [], "n2").verify is None


def test_a_skipped_node_is_neither_not_asked_again_when_it_changes_and_asked_again_on_retry() -> None:
    state = in_wave(a_fleet_spec(an_entry("a"), an_entry("b")), ["n1", "n2"])
    handed = dict(fs.hand_out(state, FLEET, ["n1", "n2"], NOW))
    assert fs.record_result(state, skipped("n1", handed["n1"].request_id, "a", "b"), NOW)
    assert fs.record_result(state, a_result("n2", handed["n2"].request_id, a="complete", b="complete"), NOW)
    # Neither success nor failure, and its budget slot is free (no longer in flight).
    assert fs.batch_results(state, ["n1", "n2"]) == (["n2"], []) and not state.in_flight
    # The next listing sees the node changed by its own window (labels, state): it is not asked again.
    fs.refresh_targets(state, a_selection(n1=targets(["a", "b"], fingerprint="after-the-skip"),
                                          n2=targets(done=["a", "b"])), a_policy())
    assert fs.wanted(state, "n1") == [] and fs.startable(state) == set()
    assert fs.remaining(state) == set()
    # `noderoll retry --nodes n1` asks it again; its next answer clears the skip.
    assert fs.apply_retry(state, Filter(nodes=["n1"])) == ["n1"]
    assert sorted(fs.wanted(state, "n1")) == ["a", "b"]
    [(node, again)] = fs.hand_out(state, FLEET, ["n1"], NOW)
    fs.record_result(state, a_result(node, again.request_id, a="complete", b="complete"), NOW)
    assert state.records["n1"].skipped == ""


def test_a_blocked_answer_without_a_skip_still_follows_the_node() -> None:
    state = in_wave(a_fleet_spec(an_entry("a")), ["n1"])
    [(node, request)] = fs.hand_out(state, FLEET, ["n1"], NOW)
    fs.record_result(state, a_result(node, request.request_id, a="blocked"), NOW)
    fs.refresh_targets(state, a_selection(n1=targets(["a"], fingerprint="changed")), a_policy())
    assert fs.wanted(state, "n1") == ["a"]


def test_progress_and_status_show_skipped_nodes_capped_with_their_number() -> None:
    nodes = [f"n{i:02d}" for i in range(SKIPPED_SHOWN + 3)]
    state = in_wave(a_fleet_spec(an_entry("a")), nodes)
    for node, request in fs.hand_out(state, FLEET, nodes, NOW):
        fs.record_result(state, skipped(node, request.request_id, "a") if node != "n00"
                         else a_result(node, request.request_id, a="complete"), NOW)
    report = every_node(fleet_progress(state, RolloutPhase.COMPLETE, NOW), state)
    assert report.nodes["n01"].skipped == SKIPPED_DRAIN_TIMEOUT and report.nodes["n00"].skipped == ""
    progress = report.packages["a"]
    # The answer lists the first SKIPPED_SHOWN and counts them all (issue 45: capped at the source).
    assert sorted(progress.skipped) == nodes[1:SKIPPED_SHOWN + 1] and progress.skipped["n01"] == WHY
    assert progress.skipped_count == SKIPPED_SHOWN + 2
    status = render_package_status(progress, 1)
    assert status["skippedNodeCount"] == SKIPPED_SHOWN + 2
    assert [n["node"] for n in status["skippedNodes"]] == nodes[1:SKIPPED_SHOWN + 1]
    # blockedNodes: the first 5 of the one reason, which blockedReasons counts (planning.views.capped).
    assert [n["node"] for n in status["blockedNodes"]] == nodes[1:6] and status["phase"] == "Blocked"
    assert status["blockedReasons"] == [{"reason": WHY, "nodes": SKIPPED_SHOWN + 2}]
    assert status["nodes"]["blocked"] == SKIPPED_SHOWN + 2
    # The CLI reads it back from the Package status when the fleet does not answer.
    assert len(progress_from_status(status).skipped) == SKIPPED_SHOWN
    # In flight again after a retry: no longer shown as skipped.
    state.in_flight["n01"] = InFlight("again", ["a"])
    fs.touch_nodes(state, ["n01"])  # what the fleet's own hand-out reports
    assert "n01" not in fleet_progress(state, RolloutPhase.PROGRESSING, NOW).packages["a"].skipped
    assert "skippedNodes" not in render_package_status(RolloutProgress(), 1)


def test_the_skipped_label_is_no_change_of_the_node() -> None:
    plain = NodeView("n1", {"pool": "gpu", NODE_STATUS_LABEL: "complete"}, (), "")
    marked = NodeView("n1", {**plain.labels, SKIPPED_LABEL: SKIPPED_DRAIN_TIMEOUT}, (), "")
    assert fingerprint(plain) == fingerprint(marked)
    assert not targeting_change(plain, marked) and not targeting_change(marked, plain)
    assert targeting_change(plain, NodeView("n1", {**plain.labels, "pool": "cpu"}, (), ""))


def test_the_cli_names_skipped_nodes() -> None:
    nodes = {"n1": NodeProgress(state="blocked", skipped=SKIPPED_DRAIN_TIMEOUT), "n2": NodeProgress(state="complete")}
    assert skipped_text(nodes) == ("skipped: 1 node(s) whose drain timed out: n1 (noderoll retry --nodes NODE)")
    assert skipped_text({"n2": nodes["n2"]}) == ""
    view = PackageView("pkg", RolloutProgress(phase=RolloutPhase.BLOCKED, skipped={"n1": WHY}), "temporal query")
    buffer = io.StringIO()
    Console(file=buffer, width=250, color_system=None).print(package_detail(view))
    assert "skipped nodes" in buffer.getvalue() and "onDrainTimeout: Skip" in buffer.getvalue()
