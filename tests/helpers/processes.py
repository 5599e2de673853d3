"""`noderoll worker` and `noderoll bridge` as processes for the tests that need the real ones. Starts processes.

One test group (a module, or one test) gets its own task queue, and its processes are stopped after it:

    run = noderoll_fixture(stage_attempts=1, retry_backoff_seconds=1)   # a test module's `run` fixture

    with noderoll_processes(stack, logs, private_stack=True) as procs:  # anywhere else
        procs.kill("worker", restart=True)

On the shared session stack the bridge sees only the Packages labelled `noderoll-test=<run id>`
(`package()` labels them) and holds a Lease of its own under its process name, so another group's
bridge never acts on this group's Packages nor takes its Lease. On a private stack (chaos, badinput,
realnode) it sees every Package, with the bridge's default Lease, identity and timings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from localstack.state import StackInfo
from protocol.node_settings import RETRY_BACKOFF_ENV, STAGE_ATTEMPTS_ENV
from tests.helpers import assert_eventually, new_task_queue, unique_name
from tests.helpers.packages import package_object
from tests.helpers.workflows_cleanup import end_workflows

TEST_LABEL = "noderoll-test"
STOP_SECONDS = 20.0  # SIGTERM, then SIGKILL (the worker's graceful shutdown takes up to 10 s)


class ProcessExited(RuntimeError):
    """A process a test waits on has exited (not an AssertionError: waiting stops at once)."""


@dataclass
class NoderollProcesses:
    """The worker and bridge processes of one test group, the settings they run with, and their logs.

    `env`: extra environment of every process started; `namespace`: the Temporal namespace (the
    server's default when None). A process is named (`worker`, `worker-2`, `bridge-b`, ...) and logs to
    `<logs>/<name>.log`; a restarted one runs the same command again.
    """

    stack: StackInfo
    logs: Path
    env: dict[str, str] = field(default_factory=dict)
    private_stack: bool = False
    namespace: str | None = None
    task_queue: str = field(default_factory=new_task_queue)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    lease_name: str = field(default_factory=lambda: unique_name("bridge-lease"))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Extra flags of every process (e.g. `--cluster NAME`).
    extra: list[str] = field(default_factory=list)
    kills: int = 0
    _commands: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    _log_starts: dict[str, int] = field(default_factory=dict)

    def _connection(self) -> list[str]:
        namespace = ["--temporal-namespace", self.namespace] if self.namespace else []
        return ["--temporal-address", self.stack.temporal_address, *namespace,
                "--kubeconfig", str(self.stack.kubeconfig), "--task-queue", self.task_queue, *self.extra]

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run the `noderoll` CLI against this stack, as an operator does (AssertionError unless it exits 0)."""
        connection = ["--temporal-address", self.stack.temporal_address, "--kubeconfig", str(self.stack.kubeconfig)]
        result = subprocess.run([sys.executable, "-m", "cli", *argv, *connection], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, (argv, result.stdout, result.stderr)
        return result

    def _start(self, name: str, argv: list[str], env: Mapping[str, str]) -> str:
        if name in self.processes:
            raise ValueError(f"a process named {name} runs already")
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        self._log_starts[name] = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "cli", *argv], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env, **env})
        self._commands[name] = (argv, dict(env))
        return name

    def start_worker(self, name: str = "worker", env: Mapping[str, str] | None = None) -> str:
        """`noderoll worker` on this group's task queue as process `name` (`env`: its extra environment)."""
        return self._start(name, ["worker", *self._connection()], env or {})

    def start_bridge(self, name: str = "bridge") -> str:
        """`noderoll bridge` as process `name` (on the shared stack also its identity); returns `name`."""
        scope = [] if self.private_stack else [
            "--label-selector", f"{TEST_LABEL}={self.run_id}", "--lease-name", self.lease_name, "--identity", name,
            "--resync-seconds", "5", "--status-seconds", "1",
            # Fleets react to node changes within 5 s, not the production 30 s: the tests wait less for
            # what a reset, a relabel or a cordon makes the fleet do (the gap: tests/unit/test_fleet_machine.py::test_node_changes_are_listed_at_most_once_per_relist_gap).
            "--fleet-relist-min-seconds", "5",
            # and notice a node workflow that ended without answering within 15 s, not 60 s.
            "--fleet-watchdog-seconds", "15"]
        return self._start(name, ["bridge", *self._connection(), *scope], {})

    def log(self, name: str) -> str:
        """Everything process `name` (and any earlier process of that name) logged so far."""
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_log(self, name: str, text: str, timeout: float = 60.0) -> None:
        """Until the running process `name` has logged `text`; ProcessExited at once when it has exited."""
        def logged() -> bool:
            proc = self.processes[name]
            if proc.poll() is not None:
                tail = "\n".join(self.log(name).splitlines()[-20:])
                raise ProcessExited(f"{name} exited with {proc.returncode} before logging {text!r}:\n{tail}")
            return text in self.log(name)[self._log_starts[name]:]

        assert_eventually(logged, timeout=timeout)

    def wait_leading(self, name: str = "bridge", timeout: float = 60.0) -> str:
        """Until bridge `name` leads (holds its Lease); returns `name`."""
        self.wait_log(name, "leading as ", timeout)
        return name

    def pids(self, prefix: str) -> list[int]:
        """Pids of the running processes whose name starts with `prefix`."""
        return [proc.pid for name, proc in self.processes.items() if name.startswith(prefix)]

    def kill(self, name: str, sig: int = signal.SIGKILL, restart: bool = False) -> None:
        """Send `sig` (no graceful shutdown by default) to process `name` and wait for it; with `restart`,
        start the same command again under the same name."""
        _stop(self.processes.pop(name), sig)
        self.kills += 1
        if restart:
            argv, env = self._commands[name]
            self._start(name, argv, env)

    def end_fleets(self) -> None:
        """Terminate the fleets still running on this group's task queue (tests/helpers/workflows_cleanup.py)."""
        end_workflows(self.stack.temporal_address, f"TaskQueue = '{self.task_queue}' AND "
                      "WorkflowType = 'FleetWorkflow' AND ExecutionStatus = 'Running'")

    def stop_all(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL); on the shared stack, end this group's fleets first."""
        if not self.private_stack:
            self.end_fleets()
        for name in list(self.processes):
            _stop(self.processes.pop(name), signal.SIGTERM)

    def package(self, name: str, spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A Package object labelled for this group's bridge."""
        return package_object(name, spec, {TEST_LABEL: self.run_id}, annotations)


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    """`sig` to the process's session (it and any child), SIGKILL after STOP_SECONDS; waits for it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=STOP_SECONDS)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=STOP_SECONDS)


def worker_settings(stage_attempts: int | None = None, retry_backoff_seconds: float | None = None,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: node-window settings (protocol/node_settings.py) and any `extra` variables."""
    env = dict(extra or {})
    if stage_attempts is not None:
        env[STAGE_ATTEMPTS_ENV] = str(stage_attempts)
    if retry_backoff_seconds is not None:
        env[RETRY_BACKOFF_ENV] = f"{retry_backoff_seconds:g}"
    return env


@contextmanager
def noderoll_processes(stack: StackInfo, logs: Path, worker_env: Mapping[str, str] | None = None, workers: int = 1,
                       bridge: bool = True, **settings: Any) -> Iterator[NoderollProcesses]:
    """`workers` workers (`worker`, or `worker-1`, `worker-2`, ...) with `worker_env` and, unless `bridge` is
    False, a bridge that leads; all stopped afterwards. `settings`: NoderollProcesses fields."""
    procs = NoderollProcesses(stack, logs, **settings)
    try:
        for index in range(1, workers + 1):
            procs.start_worker("worker" if workers == 1 else f"worker-{index}", worker_env)
        if bridge:
            procs.wait_leading(procs.start_bridge())
        yield procs
    finally:
        procs.stop_all()


def noderoll_fixture(stage_attempts: int | None = None, retry_backoff_seconds: float | None = None,
                     worker_env: Mapping[str, str] | None = None, name: str = "run",
                     scope: str = "module") -> Callable[..., Any]:
    """A fixture `name` for a test module: a worker with these settings (`worker_settings`) and a leading
    bridge on the session stack, started once per `scope` (per module by default) and stopped after it.
    Assign it to `name` in the module:

        run = noderoll_fixture(retry_backoff_seconds=1)
    """
    env = worker_settings(stage_attempts, retry_backoff_seconds, worker_env)

    @pytest.fixture(scope=scope, name=name)
    def started(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory,
                request: pytest.FixtureRequest) -> Iterator[NoderollProcesses]:
        logs = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
        with noderoll_processes(local_stack, logs, env) as procs:
            yield procs

    return started
