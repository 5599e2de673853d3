"""Short Temporal client processes exit with their own code, never SIGABRT in interpreter finalization.

The Temporal SDK's Rust threads can still hold a GIL state from the process's last client call while
the interpreter finalizes, and CPython then aborts the process ("PyGILState_Release: thread state
... must be current when releasing", temporalio/sdk-python#300). Ended with `sys.exit`, 8 of 200
processes doing what this test's script does aborted here; ended with `cli.process_exit.exit_process`
(as `noderoll` and examples/sdk_control.py end), none. CI once saw the SDK example exit -6 this way.
With `sys.exit` in the script below, 100 processes all exiting 0 has a chance of about 0.96^100,
under 2 %: the test fails without the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from temporalio.client import Client

from localstack.state import StackInfo
from tests.helpers import unique_name

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 100
AT_ONCE = 4

# The calls of a `noderoll pause` / `status`: connect, signal, describe; the product's exit.
SCRIPT = """
import asyncio, sys
from temporalio.client import Client
from service.data_converter import data_converter
from cli.process_exit import exit_process

async def main(address: str, workflow_id: str) -> int:
    client = await Client.connect(address, data_converter=data_converter)
    handle = client.get_workflow_handle(workflow_id)
    for _ in range(3):
        await handle.signal("pause", {"packages": ["example"]})
        await handle.describe()
    print("ok")
    return 0

exit_process(asyncio.run(main(sys.argv[1], sys.argv[2])))
"""


async def test_short_client_processes_exit_with_their_own_code(
    local_stack: StackInfo, temporal_client: Client, tmp_path: Path
) -> None:
    workflow_id = unique_name("exit-probe")
    # No worker polls this task queue: the workflow only receives signals and is described.
    handle = await temporal_client.start_workflow("ExitProbe", id=workflow_id, task_queue=unique_name("nobody"))
    script = tmp_path / "client.py"
    script.write_text(SCRIPT)

    def one(_: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), local_stack.temporal_address, workflow_id],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})

    try:
        with ThreadPoolExecutor(AT_ONCE) as pool:
            results = list(pool.map(one, range(PROCESSES)))
    finally:
        await handle.terminate("test over")
    bad = [(r.returncode, r.stderr[-400:]) for r in results if r.returncode != 0 or r.stdout.strip() != "ok"]
    assert not bad, f"{len(bad)} of {PROCESSES} processes did not exit 0 with their output: {bad[:3]}"
