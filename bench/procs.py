"""The processes of one benchmark run: `noderoll worker`, `noderoll bridge`, `noderoll sim`. Starts processes.

Worker and bridge run under `bench.reqcount` (their own Kubernetes requests are counted) and a
sampler records their peak RSS (process plus children) every half second. Every process started
here is stopped by `ProcessSet.stop()` (SIGTERM, then SIGKILL), by pid, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SAMPLE_SECONDS = 0.5
READY_LINE = "Ready (sandboxes"


@dataclass(frozen=True)
class Connection:
    """Where the noderoll processes connect."""

    temporal_address: str
    kubeconfig: str
    task_queue: str


@dataclass
class Managed:
    """One started process, its log, its request counts file and its peak RSS."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    counts: Path | None = None
    peak_rss: int = 0

    def rss(self) -> int:
        """RSS of the process and its children now (0 when gone)."""
        try:
            root = psutil.Process(self.proc.pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except psutil.Error:
            return 0

    def request_counts(self) -> dict[str, int]:
        """The counts `bench.reqcount` last wrote (empty when none)."""
        if self.counts is None:
            return {}
        try:
            return {str(k): int(v) for k, v in json.loads(self.counts.read_text()).items()}
        except (OSError, ValueError):
            return {}


@dataclass
class ProcessSet:
    """The processes of one run, sampled for memory until stopped.

    `external`: processes it did not start but samples too (the stack's apiserver and etcd), by name.
    """

    workdir: Path
    procs: dict[str, Managed] = field(default_factory=dict)
    external: dict[str, int] = field(default_factory=dict)
    external_peak_rss: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def start_noderoll(self, name: str, command: list[str], conn: Connection,
                       env: dict[str, str] | None = None) -> Managed:
        """Start `noderoll <command...>` (worker or bridge, plus its own flags) with request counting;
        `env`: variables added to this process's environment."""
        counts = self.workdir / f"{name}-requests.json"
        argv = [sys.executable, "-m", "bench.reqcount", str(counts), *command,
                "--temporal-address", conn.temporal_address, "--kubeconfig", conn.kubeconfig,
                "--task-queue", conn.task_queue]
        managed = self._start(name, argv, env=env)
        managed.counts = counts
        return managed

    def start_fleet(self, argv_tail: list[str], kubeconfig: str) -> Managed:
        """Start `noderoll sim` and wait for its nodes to be Ready."""
        argv = [sys.executable, "-m", "cli", "sim", "--kubeconfig", kubeconfig, *argv_tail]
        managed = self._start("sim", argv, wait_line=READY_LINE)
        return managed

    def _start(self, name: str, argv: list[str], wait_line: str | None = None,
               env: dict[str, str] | None = None) -> Managed:
        log = self.workdir / f"{name}.log"
        handle = open(log, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE if wait_line else handle, stderr=handle,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        managed = Managed(name, proc, log)
        self.procs[name] = managed
        if wait_line is not None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                handle.write(raw)
                if wait_line in raw.decode("utf-8", "replace"):
                    break
            else:
                raise RuntimeError(f"{name} exited {proc.wait()} before it was ready; see {log}")
            # Keep draining stdout into the log so the child never blocks on a full pipe.
            threading.Thread(target=_copy, args=(proc, handle), daemon=True).start()
        self._ensure_sampler()
        return managed

    def _ensure_sampler(self) -> None:
        if self._sampler is None:
            self._sampler = threading.Thread(target=self._sample, daemon=True, name="bench-rss")
            self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            for managed in list(self.procs.values()):
                managed.peak_rss = max(managed.peak_rss, managed.rss())
            for name, pid in list(self.external.items()):
                try:
                    rss = psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    continue
                self.external_peak_rss[name] = max(self.external_peak_rss.get(name, 0), rss)

    def pids(self, prefix: str) -> list[int]:
        """Pids of the started processes whose name starts with `prefix` (`worker` finds every worker)."""
        return [m.proc.pid for name, m in self.procs.items() if name.startswith(prefix)]

    def check_alive(self) -> None:
        """Raise when a started process has exited (its log tail in the message)."""
        for managed in self.procs.values():
            code = managed.proc.poll()
            if code is not None:
                tail = managed.log.read_text(errors="replace").splitlines()[-15:]
                raise RuntimeError(f"{managed.name} exited with {code}; {managed.log}:\n" + "\n".join(tail))

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        """Stop one process (its whole session) and wait for it."""
        managed = self.procs.pop(name, None)
        if managed is None:
            return
        _terminate(managed.proc, sig)

    def stop_all(self) -> None:
        """Stop every process, the sampler too."""
        self._stop.set()
        for name in list(self.procs):
            self.stop(name)


def start_sim(argv: list[str], cwd: str | None = None) -> subprocess.Popen[str]:
    """Start a `noderoll sim` (`argv`) and return once it printed READY_LINE (its nodes are Ready). Its
    output is drained afterwards: a child writing to a full pipe nobody reads blocks."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd)
    assert proc.stdout is not None
    for line in proc.stdout:
        if READY_LINE in line:
            break
    else:
        raise RuntimeError(f"noderoll sim exited {proc.wait()} before its nodes were Ready")
    threading.Thread(target=proc.stdout.read, daemon=True, name="sim-output").start()
    return proc


def _copy(proc: subprocess.Popen[bytes], handle: object) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        handle.write(raw)  # type: ignore[attr-defined]


def _terminate(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
