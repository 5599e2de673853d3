"""fleetsim's side of the agent zygote (`fleetsim.zygote`): start it once, hand it agent runs. Threads, forks.

`AgentZygote.run(argv, env, cwd)` returns an `AgentRun` at once: the run's output is a pipe
(`stdout`, read line by line as the agent prints), its pid arrives from the zygote a moment later
and its exit code when the child ends (`wait`). `send_signal` and `kill` act like a container
runtime: SIGTERM to the agent (it passes it on to the running step), SIGKILL to its whole process
group. One reader thread serves every run. The zygote is started on first use, again if it died
(its runs then end with exit code -1), and stopped by `close`.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import IO, Any

log = logging.getLogger(__name__)
MAX_MESSAGE = 1 << 16
START_TIMEOUT_SECONDS = 30.0


class AgentRun:
    """One agent run in a zygote child (the parts of `subprocess.Popen` fleetsim uses)."""

    def __init__(self, ident: str, stdout: IO[bytes], zygote: object) -> None:
        self.ident = ident
        self.stdout = stdout
        # The zygote connection this run was sent on: when it ends, only its own runs are lost (a
        # zygote started again after it may already run others).
        self.zygote = zygote
        self.pid = 0
        self.returncode: int | None = None
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._done = threading.Event()
        # A signal asked for before the pid was known, sent as soon as it is.
        self._pending: int | None = None

    def _set_pid(self, pid: int) -> None:
        with self._lock:
            self.pid = pid
            pending, self._pending = self._pending, None
        self._started.set()
        if pending is not None:
            self.send_signal(pending)

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._started.set()
        self._done.set()

    def send_signal(self, sig: int) -> None:
        """SIGTERM to the agent; SIGKILL to its process group (the steps die with it)."""
        with self._lock:
            if self.returncode is not None:
                return
            if not self.pid:
                self._pending = sig if self._pending != signal.SIGKILL else self._pending
                return
            pid = self.pid
        try:
            if sig == signal.SIGKILL:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # ended meanwhile

    def kill(self) -> None:
        """SIGKILL, like a kubelet at the end of a grace period."""
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        """The exit code, None while it runs."""
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the end of the run; the exit code (-N: killed by signal N)."""
        self._done.wait(timeout)
        return self.returncode


class AgentZygote:
    """The zygote process of one fleet and the runs it serves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._runs: dict[str, AgentRun] = {}
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The zygote's pid (None before the first run)."""
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-m", "fleetsim.zygote", str(theirs.fileno())]
        self._proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self._sock = ours
        threading.Thread(target=self._read, args=(ours,), name="fleetsim-zygote", daemon=True).start()
        log.info("fleetsim: agent zygote started (pid %d)", self._proc.pid)
        return ours

    def run(self, argv: list[str], env: dict[str, str], cwd: str) -> AgentRun:
        """Fork one agent run (`python -m agent <argv>` in effect) with `env` in `cwd`."""
        read_end, write_end = os.pipe()
        try:
            with self._lock:
                if self._closed:
                    raise RuntimeError("fleetsim agent zygote closed")
                sock = self._sock if self._sock is not None and self._alive() else self._start()
                ident = str(next(self._ids))
                run = AgentRun(ident, os.fdopen(read_end, "rb"), sock)
                self._runs[ident] = run
                message = json.dumps({"id": ident, "argv": argv, "env": env, "cwd": cwd}).encode()
                socket.send_fds(sock, [message], [write_end])
        finally:
            os.close(write_end)
        return run

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message: dict[str, Any] = json.loads(data)
            run = self._runs.get(str(message["id"]))
            if run is None:
                continue
            if "pid" in message:
                run._set_pid(int(message["pid"]))
            if "exit" in message:
                with self._lock:
                    self._runs.pop(run.ident, None)
                run._set_exit(int(message["exit"]))
        # The zygote is gone: runs it never answered end as failed. Runs sent to a zygote started
        # again since are not its own.
        with self._lock:
            orphans = [r for r in self._runs.values() if r.zygote is sock]
            for run in orphans:
                self._runs.pop(run.ident, None)
            if self._sock is sock:
                self._sock = None
        for run in orphans:
            run._set_exit(-1)
        if not self._closed:
            log.warning("fleetsim: agent zygote ended; %d run(s) lost; the next run starts it again", len(orphans))

    def close(self) -> None:
        """Kill every run, stop the zygote (it exits when its socket closes)."""
        with self._lock:
            self._closed = True
            runs = list(self._runs.values())
            sock, proc = self._sock, self._proc
        for run in runs:
            run.kill()
        if sock is not None:
            # shutdown, not only close: the reader thread blocked in recv holds the socket open, and
            # the zygote must see the end of its socket to exit.
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
