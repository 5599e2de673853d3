"""A test that leaves the session's time-skipping server stranded fails alone (`tests/conftest.py`:
`temporal_test_env`): in a pytest run of its own, the test that strands it fails at teardown, and the next
test, which sleeps an hour of virtual time, gets a new server and passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.workflows

ROOT = Path(__file__).parents[2]

INNER_TESTS = '''
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.helpers import new_task_queue
from tests.workflows.test_skipping import PeriodicWaiter, just_before_the_round


async def test_strands_the_server(temporal_test_env: WorkflowEnvironment) -> None:
    env = temporal_test_env
    task_queue = new_task_queue()
    async with Worker(env.client, task_queue=task_queue, workflows=[PeriodicWaiter]):
        handle = await env.client.start_workflow(PeriodicWaiter.run, id=f"strand-{task_queue}", task_queue=task_queue)
        await env.sleep(await just_before_the_round(env, handle))  # not `skip`: the poke's task is refused
        await handle.signal(PeriodicWaiter.poke)
        await handle.terminate("test over")


async def test_sleeps_an_hour_after_it(temporal_test_env: WorkflowEnvironment) -> None:
    before = await temporal_test_env.get_current_time()
    await temporal_test_env.sleep(3600)
    assert (await temporal_test_env.get_current_time() - before).total_seconds() >= 3600
'''


def test_a_stranded_server_fails_one_test_and_the_next_gets_a_new_one(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = session\n"
                                         "asyncio_default_test_loop_scope = session\nmarkers =\n    workflows: time-skipping tests\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr
    assert "2 passed" in summary and "1 error" in summary and "failed" not in summary, run.stdout[-3000:] + run.stderr[-2000:]
    assert "ERROR at teardown of test_strands_the_server" in run.stdout, run.stdout[-3000:]
    assert "could not skip 120 s within" in run.stdout, run.stdout[-3000:]
