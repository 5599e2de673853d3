"""Recorded fleet histories replay deterministically with the current workflow code.

tests/histories/fleet/ holds histories recorded with the fleet code before the canary rollback
(ADR 0009), on the time-skipping server with the fakes of `fleet_fakes`:
`fleet_canary-halt-then-policy-edit`: a canary fails (onFailure halt), then a policy edit starts a
wave that, under the old rule, had no canary (`planning.rollout.fleet_rollback`: unproven changes now count
as changed again, behind `workflow.patched`). A workflow change that fails here needs
`workflow.patched` (or is a deliberate break: re-record).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from service.data_converter import data_converter
from workflows.fleet import FleetWorkflow

ROOT = Path(__file__).parent.parent / "histories" / "fleet"
CASES = [pytest.param(path, id=path.stem) for path in sorted(ROOT.glob("*.json"))]


def test_histories_are_recorded() -> None:
    assert CASES, "no recorded fleet history under tests/histories/fleet"


@pytest.mark.parametrize("path", CASES)
async def test_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[FleetWorkflow], data_converter=data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
