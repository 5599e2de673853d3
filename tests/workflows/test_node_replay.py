"""Recorded node workflow histories (real dev server, real apiserver, fleetsim) replay deterministically.

Histories live in tests/histories/node/ and are recorded by the integration tests with
`NODEROLL_RECORD_HISTORIES=tests/histories/node`. A workflow change that fails here needs
`workflow.patched` (or is a deliberate break: re-record and say so in the commit).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.node import NodeWorkflow

HISTORIES = sorted((Path(__file__).parent.parent / "histories" / "node").glob("*.json"))


def test_node_histories_are_recorded() -> None:
    assert HISTORIES, "no recorded node workflow history under tests/histories/node"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_node_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(f"node/{path.stem}", path.read_text())
    replayer = Replayer(workflows=[NodeWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
