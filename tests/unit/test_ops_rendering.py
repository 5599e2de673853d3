"""Pure parts of the demo and the ops CLI: fitting the example objects, status conversion, rendering."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from api.enums import CanaryPhase, RolloutPhase, Stage, State
from api.node_state import PackageNodeState
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from fleetsim.context import PREFIX_LABEL
from fleetsim.workloads import PROTECTED_LABEL
from planning.status import RolloutProgress, package_view, render_package_status
from worker.demo_resources import DemoNames, DemoTuning, demo_objects
from worker.ops_client import NodeView, PackageView, is_finished, progress_from_status
from worker.progress_view import (
    LiveSnapshot,
    change_lines,
    nodes_json,
    nodes_table,
    package_detail,
    progress_json,
    record_batches,
    render_live,
    status_table,
)


def _text(renderable: object) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(renderable)
    return buffer.getvalue()


def _progress(**overrides: object) -> RolloutProgress:
    base = RolloutProgress(
        phase=RolloutPhase.PROGRESSING, version="1.0.0", total_nodes=4,
        counts={"complete": 1, "in_progress": 2, "erroring": 1}, batch_number=2, batch_size=2,
        canary_phase=CanaryPhase.PASSED, canary_nodes=["n-0"], erroring={"n-3": "apply exited 7"},
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def _node(name: str, state: State, stage: Stage | None = Stage.APPLY, package: str = "pkg") -> NodeView:
    entry = PackageNodeState(version="1.0.0", stage=stage, state=state, attempts=1)
    return NodeView(name=name, status="in-progress", ready=True, cordoned=True, cordoned_by_noderoll=True,
                    packages={package: entry}, labels={"topology.kubernetes.io/zone": "zone-a"})


def test_demo_objects_are_valid_and_confined_to_the_demo_fleet() -> None:
    names = DemoNames("-x1")
    objects = demo_objects(names, DemoTuning(soak_seconds=5, budget_percent=50))
    policy = DeploymentPolicySpec.model_validate(objects.policy["spec"])
    assert objects.policy["metadata"]["name"] == "gpu-fleet-x1"
    assert policy.canary is not None and policy.canary.soak_seconds == 5
    assert objects.package_names == ["sysctl-tuning-x1", "kmod-blocklist-x1"]
    for body in objects.packages:
        spec = PackageSpec.model_validate(body["spec"])
        assert spec.deployment_policy == "gpu-fleet-x1"
        assert body["spec"]["nodeSelector"]["matchLabels"][PREFIX_LABEL] == "demo-x1"
        assert body["metadata"]["labels"] == objects.policy["metadata"]["labels"] == {"demo.noderoll.io/run": "demo-x1"}
    assert names.selector == "demo.noderoll.io/run=demo-x1"
    reboot = objects.packages[1]["spec"]
    assert reboot["interrupt"]["type"] == "reboot"
    assert reboot["dependsOn"] == {"sysctl-tuning-x1": "1.0.0"}
    assert reboot["podNonInterruptLabels"] == {"matchLabels": {PROTECTED_LABEL: "true"}}


def test_progress_round_trips_through_the_package_status() -> None:
    progress = _progress(message="batch 2 running")
    status = render_package_status(progress, generation=3)
    back = progress_from_status(status)
    assert back.phase is RolloutPhase.PROGRESSING
    assert back.counts == progress.counts
    assert (back.batch_number, back.batch_size, back.total_nodes) == (2, 2, 4)
    assert back.erroring == {"n-3": "apply exited 7"}
    assert back.canary_nodes == ["n-0"]


@pytest.mark.parametrize(
    ("phase", "counts", "finished"),
    [
        pytest.param(RolloutPhase.COMPLETE, {"complete": 4}, True, id="complete"),
        pytest.param(RolloutPhase.COMPLETE, {"complete": 3, "erroring": 1}, True, id="complete-with-failures"),
        pytest.param(RolloutPhase.COMPLETE, {"complete": 3, "waiting": 1}, False, id="joiner-waiting"),
        pytest.param(RolloutPhase.COMPLETE, {"complete": 3, "skipped": 1}, False, id="skipped-is-asked-again"),
        pytest.param(RolloutPhase.COMPLETE, {"complete": 3, "blocked": 1}, False, id="blocked-by-passing-taint"),
        pytest.param(RolloutPhase.PROGRESSING, {"complete": 4}, False, id="still-progressing"),
    ],
)
def test_is_finished(phase: RolloutPhase, counts: dict[str, int], finished: bool) -> None:
    assert is_finished(_progress(phase=phase, counts=counts)) is finished


def test_status_renderings_name_phase_counts_batch_and_reasons() -> None:
    view = PackageView("pkg", _progress(), "temporal query")
    table = _text(status_table([view]))
    assert "pkg" in table and "Progressing" in table and "1/4" in table and "#2 (2 node(s))" in table
    detail = _text(package_detail(view))
    assert "erroring nodes" in detail and "apply exited 7" in detail and "temporal query" in detail
    data = progress_json(view)
    assert data["phase"] == "Progressing" and data["erroring"] == {"n-3": "apply exited 7"}
    assert data["package"] == "pkg" and data["source"] == "temporal query"


def test_a_complete_rollout_with_a_blocked_node_shows_blocked_and_names_it_everywhere() -> None:
    reason = "noderoll.io/state unreadable: not JSON (Expecting value at position 0); node held"
    progress = _progress(phase=RolloutPhase.COMPLETE, counts={"complete": 3, "blocked": 1}, erroring={},
                         blocked={"n-3": reason})
    # From the query (what `noderoll status` gets) and from the Package status (its fallback): the same.
    for view in (PackageView("pkg", package_view(progress), "temporal query"),
                 PackageView("pkg", progress_from_status(render_package_status(progress, 1)), "Package status")):
        assert view.progress.phase is RolloutPhase.BLOCKED and not is_finished(view.progress)
        table = _text(status_table([view]))
        assert "Blocked" in table and "n-3" in table and "unreadable" in table
        detail = _text(package_detail(view))
        assert "blocked nodes" in detail and "n-3" in detail and "held" in detail


def test_nodes_rendering() -> None:
    nodes = [_node("n-0", State.COMPLETE, None), _node("n-1", State.ERRORING)]
    nodes[1].packages["pkg"] = nodes[1].packages["pkg"].model_copy(update={"last_error": "exit 7"})
    text = _text(nodes_table(nodes))
    assert "n-0" in text and "complete" in text and "exit 7" in text and "cordoned (noderoll)" in text
    data = nodes_json(nodes)
    assert data[1]["packages"]["pkg"]["state"] == "erroring"
    assert data[1]["packages"]["pkg"]["lastError"] == "exit 7"


def test_live_view_tracks_batches_and_prints_changes() -> None:
    first = LiveSnapshot({"pkg": _progress(batch_number=1)}, [_node("n-0", State.IN_PROGRESS),
                                                              _node("n-1", State.WAITING, None)], 1.0)
    record_batches(first)
    second = LiveSnapshot({"pkg": _progress(batch_number=2)},
                          [_node("n-0", State.COMPLETE, None), _node("n-1", State.IN_PROGRESS)], 2.0, first.batches)
    record_batches(second)
    assert second.batches == {"pkg": {"n-0": 1, "n-1": 2}}
    shown = _text(render_live(second))
    assert "batch 1: n-0" in shown and "batch 2: n-1" in shown and "zone-a" in shown
    lines = change_lines(first, second)
    assert any("phase Progressing, batch #2" in line for line in lines)
    assert any("n-0 pkg: complete" in line for line in lines)
    assert any("n-1 pkg: in_progress (apply)" in line for line in lines)
    assert change_lines(second, second) == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["status"], {"package": None, "output": "table"}, id="status-all"),
        pytest.param(["status", "pkg", "-o", "json"], {"package": "pkg", "output": "json"}, id="status-json"),
        pytest.param(["pause", "pkg"], {"package": "pkg"}, id="pause"),
        pytest.param(["resume", "pkg"], {"package": "pkg"}, id="resume"),
        pytest.param(["halt", "pkg"], {"package": "pkg"}, id="halt"),
        pytest.param(["retry", "pkg", "--node", "a", "--node", "b"], {"package": "pkg", "node": ["a", "b"]}, id="retry"),
        pytest.param(["nodes", "-o", "json"], {"output": "json", "selector": None}, id="nodes"),
        pytest.param(["logs", "pkg", "--node", "n"], {"package": "pkg", "node": "n", "all": False}, id="logs"),
        pytest.param(["demo"], {"nodes": 24, "keep": False, "faults": None, "timeout": 900.0}, id="demo-defaults"),
        pytest.param(["demo", "--nodes", "6", "--keep", "--state-dir", "/x"], {"nodes": 6, "keep": True, "state_dir": "/x"},
                     id="demo-flags"),
    ],
)
def test_cli_contract_names(argv: list[str], expected: dict[str, object]) -> None:
    from worker.cli import build_parser

    args = build_parser().parse_args(argv)
    assert callable(args.func)
    for key, value in expected.items():
        assert getattr(args, key) == value, key


def test_status_of_one_package_shows_its_limits_and_which_are_defaults() -> None:
    from api.package import Limits

    view = PackageView("pkg", _progress(), "temporal query", limits=Limits(protected_pods_timeout_seconds=7200))
    detail = _text(package_detail(view))
    assert "limits" in detail
    assert "protected pods 7200 s, stage 1800 s (default), interrupt 900 s (default)" in detail
    assert progress_json(view)["limits"]["protectedPodsTimeoutSeconds"] == {"seconds": 7200, "default": False}
    assert progress_json(view)["limits"]["stageTimeoutSeconds"] == {"seconds": 1800, "default": True}
    assert "limits" not in progress_json(PackageView("pkg", _progress(), "temporal query"))
