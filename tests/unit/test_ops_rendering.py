"""Pure parts of the demo and the ops CLI: fitting the example objects, status conversion, rendering."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console

from api.enums import CanaryPhase, RolloutPhase, Stage, State
from api.node_state import PackageNodeState
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from cli.fleet_summary import disruptions_text, fleet_disruptions, fleet_disruptions_text
from cli.ops_client import NodeRow, PackageView, is_finished, progress_from_status
from cli.ops_fleets import QUERY_SOURCE, FleetView, attach_fleet_nodes, package_fleet
from cli.progress_view import (
    fleet_json,
    fleets_status,
    nodes_json,
    nodes_table,
    package_detail,
    packages_table,
    progress_json,
)
from demo.resources import (
    RACK_LABEL,
    DemoNames,
    DemoTuning,
    demo_objects,
    gpu_watch,
    interrupt_word,
    racks_for,
)
from demo.summary import NodeEvidence, Outcome, fleet_summary, gpu_rows, packages_summary
from demo.view import GpuWatch, LiveSnapshot, budget_line, change_lines, observe, render_live
from fleetsim.context import PREFIX_LABEL
from fleetsim.workloads import PROTECTED_LABEL
from planning.rollout.disruption import CapacityUse, WaitNote
from planning.views.eta import Eta
from planning.views.fleet_status import FleetProgress, NodeProgress
from planning.views.status import RolloutProgress, package_view, render_package_status


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


def _node(name: str, state: State, stage: Stage | None = Stage.APPLY, package: str = "pkg") -> NodeRow:
    entry = PackageNodeState(version="1.0.0", stage=stage, state=state, attempts=1)
    return NodeRow(name=name, status="in-progress", ready=True, cordoned=True, cordoned_by_noderoll=True,
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
    assert interrupt_word(objects) == "reboot"


@pytest.mark.parametrize(("nodes", "percent"), [(None, 80), (24, 80), (6, 80), (4, 75), (2, 50)])
def test_demo_policy_keeps_a_gpu_floor_that_lets_one_node_go_and_one_node_per_rack(nodes: int | None,
                                                                                   percent: int) -> None:
    objects = demo_objects(DemoNames("-x2"), DemoTuning(soak_seconds=5, budget_percent=50, nodes=nodes))
    budget = DeploymentPolicySpec.model_validate(objects.policy["spec"]).default.budget
    assert budget.percent == 50 and budget.min_available is not None
    assert (budget.min_available.resource, budget.min_available.percent) == ("nvidia.com/gpu", percent)
    assert [(t.key, t.max) for t in budget.topology_limits] == [(RACK_LABEL, 1)]
    if nodes:
        total = 8 * nodes
        assert total - 8 >= -(-total * percent // 100), "one node may always enter a window"
    assert gpu_watch(objects) == GpuWatch(rack_label=RACK_LABEL, rack_max=1)
    assert racks_for(24) == 6 and racks_for(6) == 2


def test_the_demo_watches_the_gpu_floor_and_the_racks_on_the_nodes() -> None:
    def row(name: str, rack: str, ready: bool = True, cordoned: bool = False, status: str = "complete") -> NodeRow:
        return NodeRow(name=name, status=status, ready=ready, cordoned=cordoned, cordoned_by_noderoll=cordoned,
                       labels={RACK_LABEL: rack}, allocatable={"nvidia.com/gpu": "8"})

    snapshot = LiveSnapshot("gpu", gpus=GpuWatch(rack_label=RACK_LABEL, rack_max=1))
    snapshot.nodes = [row("a", "r0"), row("b", "r0"), row("c", "r1")]
    observe(snapshot)
    snapshot.nodes = [row("a", "r0", status="in-progress", cordoned=True), row("b", "r0", ready=False), row("c", "r1")]
    observe(snapshot)
    snapshot.nodes = [row("a", "r0"), row("b", "r0"), row("c", "r1", cordoned=True)]
    observe(snapshot)
    assert (snapshot.gpus.lowest, snapshot.gpus.total, snapshot.gpus.rack_peak) == (8, 24, 2)
    progress = FleetProgress(capacity=[CapacityUse("default", "nvidia.com/gpu", 16, 16, 24)],
                             waits=[WaitNote("default", "topology", 1, "rack r0 has 1 node in a window (max 1)")])
    snapshot.progress = progress
    assert budget_line(snapshot) == ("GPUs: 16 of 24 available with the batch out (floor 16); "
                                     "waiting: rack r0 has 1 node in a window (max 1), 1 node held")
    assert dict(gpu_rows(snapshot, progress)) == {
        "GPUs schedulable": "8 of 24 at the lowest (floor 16) (seen on the Nodes)",
        "nodes of one rack down": "2 at most (max 1) (seen on the Nodes)"}


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


def _fleet(nodes: dict[str, NodeProgress] | None = None, **overrides: object) -> FleetProgress:
    base = FleetProgress(
        policy="gpu", phase=RolloutPhase.PROGRESSING, wave=1, batch_number=2, batch_size=2,
        canary_phase=CanaryPhase.PASSED, canary_nodes=["n-0"], total_nodes=4,
        counts={"complete": 1, "in_progress": 2, "erroring": 1},
        packages={"pkg": _progress(), "dep": _progress(version="2.0.0", counts={"complete": 4})},
        nodes=nodes or {}, message="batch 2 running",
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def _disrupted(windows: int, drains: int, interrupts: int, state: str = "complete") -> NodeProgress:
    return NodeProgress(state=state, packages={"pkg": state}, windows=windows, cordons=drains, drains=drains,
                        interrupts=interrupts)


def test_package_renderings_name_fleet_phase_counts_batch_and_reasons() -> None:
    view = PackageView("pkg", _progress(), QUERY_SOURCE, fleet="gpu")
    detail = _text(package_detail(view))
    assert "fleet/gpu" in detail and "erroring nodes" in detail and "apply exited 7" in detail
    assert "temporal query" in detail and "#2 (2 node(s))" in detail
    data = progress_json(view)
    assert data["phase"] == "Progressing" and data["erroring"] == {"n-3": "apply exited 7"}
    assert data["package"] == "pkg" and data["source"] == "temporal query" and data["fleet"] == "gpu"


def test_fleet_status_shows_a_table_per_fleet_with_its_packages_under_it() -> None:
    nodes = {"n-0": _disrupted(1, 1, 1), "n-1": _disrupted(1, 1, 1), "n-2": _disrupted(0, 0, 0, "waiting")}
    answered = FleetView("gpu", _fleet(nodes), QUERY_SOURCE, [
        PackageView("dep", _fleet().packages["dep"], QUERY_SOURCE, fleet="gpu"),
        PackageView("pkg", _progress(), QUERY_SOURCE, fleet="gpu"),
    ])
    silent = FleetView("default", None, "fleet/default did not answer: workflow not found", [
        PackageView("solo", _progress(phase=RolloutPhase.INVALID, message="bad spec"),
                    "Package status (fleet/default did not answer: workflow not found)", fleet="default"),
    ])
    text = _text(fleets_status([answered, silent]))
    assert text.index("fleet/gpu") < text.index("dep") < text.index("pkg") < text.index("fleet/default")
    assert "Progressing" in text and "#2 (2 node(s))" in text and "1/4 complete" in text
    assert "disruptions: 2 nodes, 1 drain and 1 interrupt each; 1 node not disrupted" in text
    assert "did not answer: workflow not found" in text and "[Package status" in text and "Invalid" in text
    data = [fleet_json(answered), fleet_json(silent)]
    assert data[0]["fleet"] == "gpu" and data[0]["wave"] == 1 and data[0]["counts"]["in_progress"] == 2
    assert data[0]["disruptions"] == {"windows": 2, "cordons": 2, "drains": 2, "interrupts": 2}
    assert [p["package"] for p in data[0]["packages"]] == ["dep", "pkg"]
    assert "phase" not in data[1] and data[1]["packages"][0]["phase"] == "Invalid"


@pytest.mark.parametrize(
    ("nodes", "word", "expected"),
    [
        pytest.param({f"n{i}": _disrupted(1, 1, 1) for i in range(24)}, "reboot", "24 nodes, 1 drain and 1 reboot each",
                     id="one-each"),
        pytest.param({"a": _disrupted(2, 2, 2), "b": _disrupted(1, 1, 1), "c": _disrupted(1, 1, 1)}, "reboot",
                     "2 nodes, 1 drain and 1 reboot each; 1 node, 2 drains and 2 reboots", id="one-node-twice"),
        pytest.param({"a": _disrupted(1, 0, 1)}, "interrupt", "1 node, 1 interrupt", id="interrupt-without-drain"),
        pytest.param({}, "reboot", "no nodes", id="empty"),
    ],
)
def test_disruptions_text(nodes: dict[str, NodeProgress], word: str, expected: str) -> None:
    assert disruptions_text(nodes, word) == expected


def test_a_complete_rollout_with_a_blocked_node_shows_blocked_and_names_it_everywhere() -> None:
    reason = "noderoll.io/state unreadable: not JSON (Expecting value at position 0); node held"
    progress = _progress(phase=RolloutPhase.COMPLETE, counts={"complete": 3, "blocked": 1}, erroring={},
                         blocked={"n-3": reason})
    # From the fleet's query (what `noderoll status` gets) and from the Package status (its fallback): the same.
    for view in (PackageView("pkg", package_view(progress), "temporal query"),
                 PackageView("pkg", progress_from_status(render_package_status(progress, 1)), "Package status")):
        assert view.progress.phase is RolloutPhase.BLOCKED and not is_finished(view.progress)
        table = _text(packages_table([view]))
        assert "Blocked" in table and "n-3" in table and "unreadable" in table
        detail = _text(package_detail(view))
        assert "blocked nodes" in detail and "n-3" in detail and "held" in detail


def test_nodes_rendering_shows_fleet_state_and_disruptions() -> None:
    nodes = [_node("n-0", State.COMPLETE, None), _node("n-1", State.ERRORING)]
    nodes[1].packages["pkg"] = nodes[1].packages["pkg"].model_copy(update={"last_error": "exit 7"})
    nodes[0].fleets["gpu"] = _disrupted(1, 1, 1)
    nodes[1].fleets["gpu"] = NodeProgress(state="erroring", packages={"pkg": "erroring"}, reason="pkg: exit 7")
    text = _text(nodes_table(nodes))
    assert "n-0" in text and "complete" in text and "exit 7" in text and "cordoned (noderoll)" in text
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│ n-")}
    assert "│ gpu " in lines["n-0"] and "complete" in lines["n-0"] and "1 window: 1 drain, 1 interrupt" in lines["n-0"]
    assert "│ gpu " in lines["n-1"] and "erroring" in lines["n-1"] and "│ none " in lines["n-1"]
    data = nodes_json(nodes)
    assert data[1]["packages"]["pkg"]["state"] == "erroring"
    assert data[1]["packages"]["pkg"]["lastError"] == "exit 7"
    assert data[0]["fleets"]["gpu"]["drains"] == 1 and data[1]["fleets"]["gpu"]["state"] == "erroring"


class _FleetNodes:
    """What `Ops.fleet_nodes` answers: each fleet's nodes as its `progress` pages list them."""

    def __init__(self, reports: dict[str, dict[str, NodeProgress]]) -> None:
        self.reports = reports
        self.asked: list[str] = []

    async def fleet_nodes(self, fleet: str) -> dict[str, NodeProgress]:
        self.asked.append(fleet)
        return self.reports[fleet]


def test_attach_fleet_nodes_only_from_fleets_that_answered() -> None:
    nodes = [_node("n-0", State.COMPLETE, None), _node("n-9", State.COMPLETE, None)]
    ops = _FleetNodes({"gpu": {"n-0": _disrupted(1, 1, 1)}})
    asyncio.run(attach_fleet_nodes(ops, nodes, [FleetView("gpu", _fleet(), QUERY_SOURCE),  # type: ignore[arg-type]
                                                FleetView("other", None, "did not answer")]))
    assert list(nodes[0].fleets) == ["gpu"] and nodes[1].fleets == {}
    assert ops.asked == ["gpu"]  # the fleet that did not answer the summary is not asked for its nodes


def test_fleet_disruptions_from_the_summary_without_nodes() -> None:
    summary = FleetProgress(total_nodes=200, disruptions={"windows": 198, "cordons": 198, "drains": 198,
                                                          "interrupts": 198},
                            disruption_nodes={"drains": {"0": 2, "1": 198}, "interrupts": {"0": 2, "1": 198}})
    assert fleet_disruptions_text(summary, "reboot") == "198 nodes, 1 drain and 1 reboot each; 2 nodes not disrupted"
    mixed = FleetProgress(total_nodes=3, disruption_nodes={"drains": {"1": 2, "2": 1}, "interrupts": {"1": 3}})
    assert fleet_disruptions_text(mixed) == "drains per node 1×2 2×1; interrupts per node 1×3"
    assert fleet_disruptions(summary)["drains"] == 198
    assert fleet_disruptions_text(FleetProgress(total_nodes=4, disruption_nodes={"drains": {"0": 4}})) == (
        "4 nodes not disrupted")


def test_package_fleet_is_its_policy_or_default() -> None:
    assert package_fleet({"spec": {"deploymentPolicy": "gpu"}}) == "gpu"
    assert package_fleet({"spec": {}}) == "default"
    assert package_fleet({}) == "default"


def _live(progress: FleetProgress | None, nodes: list[NodeRow], elapsed: float,
          before: LiveSnapshot | None = None) -> LiveSnapshot:
    packages = {"pkg": progress.packages["pkg"]} if progress else {}
    snapshot = LiveSnapshot("gpu", progress, packages, nodes, elapsed, "reboot",
                            before.batches if before else {}, before.boot_ids if before else {})
    observe(snapshot)
    return snapshot


def test_live_view_tracks_batches_boot_ids_and_prints_changes() -> None:
    n0, n1 = _node("n-0", State.IN_PROGRESS), _node("n-1", State.WAITING, None)
    n0.boot_id, n1.boot_id = "boot-a", "boot-b"
    first = _live(_fleet({"n-0": NodeProgress(state="in_progress"), "n-1": NodeProgress()}, batch_number=1),
                  [n0, n1], 1.0)
    m0, m1 = _node("n-0", State.COMPLETE, None), _node("n-1", State.IN_PROGRESS)
    m0.boot_id, m1.boot_id = "boot-a2", "boot-b"
    second = _live(_fleet({"n-0": _disrupted(1, 1, 1), "n-1": NodeProgress(state="in_progress")}), [m0, m1], 2.0,
                   first)
    assert second.batches == {"n-0": (1, 1), "n-1": (1, 2)}
    assert second.reboots_seen() == {"n-0": 1, "n-1": 0}
    shown = _text(render_live(second))
    assert "fleet/gpu" in shown and "wave 1" in shown
    assert "batch 1: n-0" in shown and "batch 2: n-1" in shown and "zone-a" in shown
    assert "1 drain, 1 reboot" in shown and "disruptions: 1 node, 1 drain and 1 reboot; 1 node not disrupted" in shown
    lines = change_lines(first, second)
    assert any("fleet/gpu: phase Progressing, wave 1, batch #2" in line for line in lines)
    assert any("n-0 pkg: complete" in line for line in lines)
    assert any("n-1 pkg: in_progress (apply)" in line for line in lines)
    assert any("n-0: window 1 done, 1 drain, 1 reboot so far" in line for line in lines)
    assert change_lines(second, second) == []


def test_summary_reports_the_fleet_and_both_sources_of_disruptions() -> None:
    nodes = [_node(f"n-{i}", State.COMPLETE, None) for i in range(3)]
    progress = _fleet({n.name: _disrupted(1, 1, 1) for n in nodes}, phase=RolloutPhase.COMPLETE, batch_number=2)
    snapshot = _live(progress, nodes, 5.0)
    snapshot.boot_ids = {"n-0": ["a", "a2"], "n-1": ["b", "b2"], "n-2": ["c", "c2", "c3"]}
    outcome = Outcome(0, "done", snapshot, {"pkg": 4.0}, {"pkg": progress.packages["pkg"]}, progress)
    evidence = NodeEvidence({"n-0": 1, "n-1": 1, "n-2": 1}, {"n-0": 1, "n-1": 1, "n-2": 1}, {"pkg": 0})
    packages = _rows(_text(packages_summary(outcome, evidence)))
    assert packages["phase"] == ["Progressing"] and packages["duration"] == ["4s"]
    fleet = _rows(_text(fleet_summary(outcome, evidence)))
    assert fleet["disruptions"] == ["3 nodes, 1 drain and 1 reboot each"]
    assert fleet["waves"] == ["1"] and fleet["batches"][0].startswith("2 ")
    assert fleet["cordon Events"] == ["3 in all, 1 on each of 3 nodes (on the Nodes)"]
    # Only two sources agree here: the boot ids show a second reboot of n-2.
    assert fleet["boot id changes"] == ["4 in all: 1 on 2 nodes, 2 on 1 node (seen on the Nodes)"]


def _rows(text: str) -> dict[str, list[str]]:
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    return {cells[0]: cells[1:] for cells in table if cells and cells[0]}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["status"], {"package": None, "fleet": None, "output": "table"}, id="status-all"),
        pytest.param(["status", "pkg", "-o", "json"], {"package": "pkg", "output": "json"}, id="status-json"),
        pytest.param(["status", "pkg", "--json"], {"package": "pkg", "output": "json"}, id="status-json-flag"),
        pytest.param(["status", "--fleet", "gpu"], {"package": None, "fleet": "gpu", "output": "table"},
                     id="status-fleet"),
        pytest.param(["pause", "pkg"], {"package": "pkg", "fleet": None, "node": []}, id="pause"),
        pytest.param(["resume", "pkg"], {"package": "pkg"}, id="resume"),
        pytest.param(["resume", "--fleet", "gpu"], {"package": None, "fleet": "gpu"}, id="resume-fleet"),
        pytest.param(["halt", "pkg"], {"package": "pkg"}, id="halt"),
        pytest.param(["halt", "--fleet", "gpu", "--node", "a"], {"fleet": "gpu", "node": ["a"]}, id="halt-fleet-node"),
        pytest.param(["retry", "pkg", "--node", "a", "--node", "b"], {"package": "pkg", "node": ["a", "b"]}, id="retry"),
        pytest.param(["nodes", "-o", "json"], {"output": "json", "selector": None}, id="nodes"),
        pytest.param(["nodes", "--json", "--fleet", "gpu"], {"output": "json", "fleet": "gpu"}, id="nodes-fleet"),
        pytest.param(["logs", "pkg", "--node", "n"], {"package": "pkg", "node": "n", "all": False}, id="logs"),
        pytest.param(["demo"], {"nodes": 24, "keep": False, "faults": None, "timeout": 900.0}, id="demo-defaults"),
        pytest.param(["demo", "--nodes", "6", "--keep", "--state-dir", "/x"], {"nodes": 6, "keep": True, "state_dir": "/x"},
                     id="demo-flags"),
    ],
)
def test_cli_contract_names(argv: list[str], expected: dict[str, object]) -> None:
    from cli.main import build_parser

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


def test_status_shows_the_fleets_eta_with_what_it_rests_on() -> None:
    fleet = _fleet({"n-0": _disrupted(1, 1, 1)})
    fleet.eta = Eta(finish_at="2025-01-01T10:42:00+00:00", seconds_left=750, batches_left=3,
                    source="measured: reboot p50 62s of 4 window(s)")
    view = FleetView("gpu", fleet, QUERY_SOURCE, [PackageView("pkg", _progress(eta=fleet.eta), QUERY_SOURCE)])
    text = _text(fleets_status([view]))
    assert "2025-01-01T10:42:00+00:00 (in 12m30s, 3 batches)" in text
    assert "eta: " in text and "measured: reboot p50 62s" in text and "every window succeeds" in text
    assert fleet_json(view)["eta"]["batches_left"] == 3
    assert "measured: reboot p50 62s" in _text(package_detail(view.packages[0]))
    assert "ETA" in _text(fleets_status([FleetView("gpu", _fleet({}), QUERY_SOURCE, [])]))
