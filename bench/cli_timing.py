"""How long `noderoll status` and `noderoll plan` take against a benchmark's fleet (issue 45). Starts processes.

Each is run as an operator runs it (`python -m cli ...`, a fresh process: the interpreter's start-up
counts, as it does for them) against the run's stack, with a timeout; the wall seconds, the exit code and
the size of what it printed are kept. `status` is asked while the windows run (its answer comes from the
fleet's `progress` query, computed by the worker between the windows' workflow tasks); `plan` once they
ended (it simulates the fleet's remaining wave on a snapshot of every Node).
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

STATUS_TIMEOUT_SECONDS = 120.0
PLAN_TIMEOUT_SECONDS = 900.0


@dataclass(frozen=True)
class CliRun:
    """One run of a CLI command: wall seconds (the timeout when it did not end), exit code (None: timed out)."""

    command: str
    seconds: float
    exit_code: int | None
    output_bytes: int


def time_cli(args: list[str], connection: list[str], timeout: float) -> CliRun:
    """Run `noderoll <args> <connection>` and time it."""
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "cli", *args, *connection], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return CliRun(" ".join(args), timeout, None, 0)
    return CliRun(" ".join(args), round(time.monotonic() - started, 2), done.returncode, len(done.stdout))


def connection_args(temporal_address: str, kubeconfig: str) -> list[str]:
    """The flags that point a CLI command at the run's stack."""
    return ["--temporal-address", temporal_address, "--kubeconfig", kubeconfig]


def status_run(policy: str, connection: list[str]) -> dict[str, Any]:
    """`noderoll status --fleet <policy> --json`, timed."""
    return asdict(time_cli(["status", "--fleet", policy, "--json"], connection, STATUS_TIMEOUT_SECONDS))


def plan_run(policy: str, connection: list[str]) -> dict[str, Any]:
    """`noderoll plan --fleet <policy> -o json`, timed."""
    return asdict(time_cli(["plan", "--fleet", policy, "-o", "json"], connection, PLAN_TIMEOUT_SECONDS))
