"""Every workflow the worker registers has a recorded history, and every recorded history replays.

Style rule 15. The workflow classes come from the worker's own registry (`worker.registry.WORKFLOWS`,
and `GLOBAL_WORKFLOWS` on the task queue `noderoll-global`), so a workflow type added there without a
recorded history fails here. Histories live under
tests/histories/<kind>/ (the kind is only a folder: each file's type is read from its first event)
and were recorded on the real stack (dev server, apiserver, fleetsim):
* fleet/ and node/window-reboot-dependency, node/window-dependent-of-failed-skipped:
  `NODEROLL_RECORD_FLEET_HISTORIES=tests/histories` with tests/integration/test_fleet_rollout.py
  (fleet-canary-then-batch-two-packages and fleet_canary-halt-then-policy-edit before the patch
  `unproven-changes-count-again`);
* node/window-*: `NODEROLL_RECORD_HISTORIES=tests/histories/node` with tests/integration/test_node_window.py
  and test_node_config_change.py (the node workflow driven with the fleet's `window` request);
* node/fleet-window-*: recorded before the one-engine release (ADR 0013) with the patches that are
  deprecated since (`workflow.deprecate_patch`), so windows recorded with them still replay;
* global/ and fleet/clusters-*: `NODEROLL_RECORD_CLUSTER_HISTORIES=tests/histories` with
  tests/integration/test_multi_cluster.py (two control planes, one Temporal: `global/<policy>` of stages
  [[a], [b]] and cluster b's fleet with the patch `global-turns`, waiting for its turn then rolling out);
  global/global-ended-in-every-cluster and fleet/clusters-fleet-ended-reports-it the same run once the
  Package and the policy were deleted in both clusters (the patch `global-ended-report`: the fleet
  reports that it ended, the global workflow completes; recorded into a scratch folder and copied, so
  the two above stay as recorded before it).
* node/*-one-pod-per-phase: `NODEROLL_RECORD_HISTORIES=<dir>` with tests/integration/test_node_window.py
  (recorded into a scratch folder and copied, so the histories of the same names recorded before
  issue #26 stay): one pod per window phase and the window's end in one activity (`one-pod-per-phase`,
  `close-in-one-call`); the ones without the suffix replay the paths before them;
* fleet/fleet-drain-ahead-gpu-floor: `NODEROLL_RECORD_FLEET_HISTORIES=tests/histories` with
  tests/integration/test_gpu_budgets.py (drain-ahead's marks with the taint, a GPU floor, issue #28);
* fleet/fleet-canary-then-batch-window-cost, node/*-window-cost: the fleet's names for issue #26 in
  tests/integration/test_fleet_rollout.py (`RECORDED_AS`): node runs started with their first request.
* node/*-short-calls-local: `NODEROLL_RECORD_HISTORIES=<dir>` with tests/integration/test_node_window.py
  and test_node_config_change.py, `NODEROLL_RECORD_FLEET_HISTORIES=<dir>` with test_fleet_rollout.py
  (scratch folders, the node histories copied): the read, the first state write and the cordon as local
  activities (patch `short-calls-local`, ADR 0020); the histories of the same names with the suffixes
  `-one-pod-per-phase` and `-window-cost` replay their activities.
* global/global-dropped-clusters-ends, fleet/clusters-dropped-reports-ended:
  `NODEROLL_RECORD_CLUSTER_HISTORIES=<dir>` with tests/integration/test_multi_cluster.py (test e, copied): a
  policy that drops `spec.clusters` (patch `global-dropped-report`: the fleet reports it ended) and a
  stage that no longer waits for a cluster whose fleet ended (patch `global-ended-release`), issue 43.
* fleet/fleet-budget-at-hand-out: `NODEROLL_RECORD_FLEET_HISTORIES=<dir>` with
  tests/integration/test_plan_budgets.py (a scratch folder, copied): the fleet machine's fresh read of the
  nodes before each hand-out (patch `budget-at-hand-out`, issue 43), a node cordoned from outside during
  drain-ahead's lead.
* fleet/fleet-respect-other-maintenance: `NODEROLL_RECORD_FLEET_HISTORIES=<dir>` with
  tests/integration/test_respect_rollout.py (a scratch folder, copied): nodes held by a NodeMaintenance and
  by the autoscaler's taint not started and counted against the count budget and the floor (patch
  `respect-other-maintenance`, issue 44 item 5).
* node/window-workloads-notice-rules: `NODEROLL_RECORD_HISTORIES=tests/histories/node` with
  tests/integration/test_gpu_workloads.py (a request carrying a policy's `spec.workloads`: the eviction
  notice's activity and timer, then a drain with rules; issue 44). No patch: the steps run only for
  requests with that field, which no run recorded before it had.
* node/window-verify-*: `NODEROLL_RECORD_FLEET_HISTORIES=tests/histories` with
  tests/integration/test_gpu_verify.py: a window whose GPU verify fails (the node left cordoned,
  `verify-failed`) and the window `retry` runs again, whose verify passes (`spec.verify`, issue 44: a
  request with `verify` only; windows without it run no new command).
* fleet/fleet-canary-then-batch-listings-scale: `NODEROLL_RECORD_FLEET_HISTORIES=<dir>` with
  tests/integration/test_fleet_rollout.py::test_fleet_and_node_window_histories_replay (a scratch folder, the
  fleet's history copied under this name): listings at most every 0.03 s per node (patch
  `listings-scale-with-the-fleet`, issue 45).
Every `workflow.patched(...)` id in workflows/ (and every `FleetRun.patched` id in planning/fleet/) must be recorded (its marker) in some history, so its
patched path replays; its unpatched path replays from the histories recorded before the patch (the
ones without its marker). A workflow change that fails here needs `workflow.patched` (or is a
deliberate break: re-record and say so in the commit); a new patch needs a history recorded with it.
"""

from __future__ import annotations

import ast
import base64
import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from service.data_converter import data_converter
from worker.registry import GLOBAL_WORKFLOWS, WORKFLOWS

REGISTERED = [*WORKFLOWS, *GLOBAL_WORKFLOWS]

ROOT = Path(__file__).parent.parent / "histories"
HISTORIES = sorted(ROOT.glob("*/*.json"))
# Where `patched` is asked: the workflows, and the fleet's machine (`FleetRun.patched`, answered by the
# fleet workflow's `workflow.patched(command.patch_id)`, a pass-through with no id of its own).
WORKFLOW_SOURCES = sorted([*(Path(__file__).parents[2] / "workflows").glob("*.py"),
                           *(Path(__file__).parents[2] / "planning" / "fleet").glob("*.py")])
PASS_THROUGH = "command.patch_id"


def workflow_type(path: Path) -> str:
    """The workflow type a recorded history ran (its first event starts the execution)."""
    first = json.loads(path.read_text())["events"][0]
    return str(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])


def registered_types() -> dict[str, type]:
    """Workflow type name -> class, for every workflow `noderoll worker` registers."""
    types = {}
    for cls in REGISTERED:
        definition = workflow._Definition.must_from_class(cls)
        assert definition.name is not None, f"{cls.__name__} is a dynamic workflow"
        types[definition.name] = cls
    return types


def patch_ids_in_source() -> dict[str, str]:
    """Every id passed to `patched` / `deprecate_patch` in workflows/ and planning/fleet/ -> the module calling it.

    The argument is a string or a module-level string constant of any of those modules.
    """
    constants: dict[str, str] = {}
    calls: list[tuple[ast.expr, str]] = []
    for path in WORKFLOW_SOURCES:
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                constants.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("patched", "deprecate_patch") and node.args):
                calls.append((node.args[0], path.name))
    ids = {}
    for arg, module in calls:
        if isinstance(arg, ast.Constant):
            ids[str(arg.value)] = module
        elif ast.unparse(arg) != PASS_THROUGH:
            assert isinstance(arg, ast.Name) and arg.id in constants, f"{module}: patch id {ast.dump(arg)} not a constant"
            ids[constants[arg.id]] = module
    return ids


def recorded_patch_ids(path: Path) -> set[str]:
    """The patch ids whose markers a recorded history holds."""
    ids = set()
    for event in json.loads(path.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if marker and marker.get("markerName") == "core_patch":
            for payload in marker["details"]["patch-data"]["payloads"]:
                ids.add(json.loads(base64.b64decode(payload["data"]))["id"])
    return ids


def test_every_patched_path_has_a_recorded_history() -> None:
    in_source = patch_ids_in_source()
    assert in_source, "no workflow.patched call found under workflows/"
    recorded = set().union(*(recorded_patch_ids(path) for path in HISTORIES))
    missing = {patch: module for patch, module in sorted(in_source.items()) if patch not in recorded}
    assert not missing, f"patched paths without a recorded history under tests/histories: {missing}"


def test_every_registered_workflow_type_has_a_recorded_history() -> None:
    recorded = {workflow_type(path) for path in HISTORIES}
    missing = sorted(set(registered_types()) - recorded)
    assert not missing, f"no recorded history under tests/histories for {missing}"


def test_every_recorded_history_is_of_a_registered_workflow_type() -> None:
    unknown = {path.name: workflow_type(path) for path in HISTORIES if workflow_type(path) not in registered_types()}
    assert not unknown, f"histories of workflow types the worker does not register: {unknown}"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: f"{p.parent.name}-{p.stem}")
async def test_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(f"{path.parent.name}/{path.stem}", path.read_text())
    replayer = Replayer(workflows=REGISTERED, data_converter=data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
