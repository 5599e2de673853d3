"""Recorded histories from integration tests: replay a run's histories against the worker's workflows and,
when asked, save them for tests/workflows/test_replay.py.

    await replay_and_record({"fleet/<name>": history, ...}, "NODEROLL_RECORD_FLEET_HISTORIES")

With the environment variable set to a folder (`tests/histories`), each history is written to
`<folder>/<kind>/<name>.json`; without it they are only replayed.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.worker import Replayer

from service.data_converter import data_converter
from tests.helpers import assert_eventually_async
from worker.registry import GLOBAL_WORKFLOWS, WORKFLOWS


async def replay_and_record(histories: dict[str, WorkflowHistory], record_env: str) -> None:
    """Replay each history (`<kind>/<name>` -> history); save them under `$record_env` when it is set."""
    replayer = Replayer(workflows=[*WORKFLOWS, *GLOBAL_WORKFLOWS], data_converter=data_converter)
    for name, history in histories.items():
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (name, result.replay_failure)
    target = os.environ.get(record_env)
    for name, history in histories.items() if target else ():
        (Path(target) / name).parent.mkdir(parents=True, exist_ok=True)
        (Path(target) / f"{name}.json").write_text(history.to_json())


async def completed_history(client: Client, workflow_id: str, timeout: float = 120.0) -> WorkflowHistory:
    """The history of `workflow_id`'s latest run once it completed (within `timeout` seconds)."""
    handle = client.get_workflow_handle(workflow_id)

    async def completed() -> bool:
        status = (await handle.describe()).status
        assert status == WorkflowExecutionStatus.COMPLETED, status
        return True

    await assert_eventually_async(completed, timeout=timeout)
    return await handle.fetch_history()
