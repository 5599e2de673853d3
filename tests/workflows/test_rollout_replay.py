"""Recorded rollout and budget histories (real dev server, apiserver, fleetsim) replay deterministically.

Histories live in tests/histories/rollout/ and tests/histories/budget/, fetched from the stack of
`tests/integration/test_rollout.py` runs (`temporal workflow show --output json` gives the same JSON).
A workflow change that fails here needs `workflow.patched` (or is a deliberate break: re-record).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.budget import BudgetWorkflow
from workflows.rollout import RolloutWorkflow

ROOT = Path(__file__).parent.parent / "histories"
CASES = [
    pytest.param(kind, path, id=f"{kind}-{path.stem}")
    for kind in ("rollout", "budget")
    for path in sorted((ROOT / kind).glob("*.json"))
]


@pytest.mark.parametrize("kind", ["rollout", "budget"])
def test_histories_are_recorded(kind: str) -> None:
    assert list((ROOT / kind).glob("*.json")), f"no recorded {kind} history under tests/histories/{kind}"


@pytest.mark.parametrize(("kind", "path"), CASES)
async def test_history_replays(kind: str, path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[RolloutWorkflow, BudgetWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
