"""Every workflow the worker registers has a recorded history, and every recorded history replays.

Style rule 15. The workflow classes come from the worker's own registry (`worker.registry.WORKFLOWS`),
so a workflow type added there without a recorded history fails here. Histories live under
tests/histories/<kind>/ (the kind is only a folder: each file's type is read from its first event)
and were recorded on the real stack (dev server, apiserver, fleetsim):
* fleet/ and node/fleet-window-*: `NODEROLL_RECORD_FLEET_HISTORIES=tests/histories` with
  tests/integration/test_fleet_rollout.py::test_fleet_and_node_window_histories_replay;
* node/node-window-*: `NODEROLL_RECORD_HISTORIES=tests/histories/node` with tests/integration/test_node_window.py
  and test_node_config_change.py (legacy per-Package requests);
* rollout/ and budget/: the per-Package rollouts before fleets (ADR 0007), still registered so that
  runs started before an upgrade finish.
A workflow change that fails here needs `workflow.patched` (or is a deliberate break: re-record and
say so in the commit).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from worker.registry import WORKFLOWS

ROOT = Path(__file__).parent.parent / "histories"
HISTORIES = sorted(ROOT.glob("*/*.json"))


def workflow_type(path: Path) -> str:
    """The workflow type a recorded history ran (its first event starts the execution)."""
    first = json.loads(path.read_text())["events"][0]
    return str(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])


def registered_types() -> dict[str, type]:
    """Workflow type name -> class, for every workflow `noderoll worker` registers."""
    types = {}
    for cls in WORKFLOWS:
        definition = workflow._Definition.must_from_class(cls)
        assert definition.name is not None, f"{cls.__name__} is a dynamic workflow"
        types[definition.name] = cls
    return types


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
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
