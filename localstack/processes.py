"""Process supervision for the local stack: start detached, find free ports, poll health, stop groups.

Each component runs in its own session (process group) so that `dev down` can stop it and any
child it forked with one signal, and so a Ctrl-C in the terminal of `dev up` does not reach it.
Does I/O (processes, sockets, HTTP).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from localstack.state import ComponentInfo

PR_SET_PDEATHSIG = 1
# Popen objects of children started by this Python process: kept so they can be reaped
# (a dead, unreaped child is a zombie that still shows up in the process table).
_children: dict[int, subprocess.Popen[bytes]] = {}


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on (or holds) `host:port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the servers themselves: a TIME_WAIT leftover does not make a port busy, a listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(preferred: Iterable[int | None], taken: set[int]) -> int:
    """The first free port of `preferred` not already in `taken`, else one the kernel picks."""
    for port in preferred:
        if port and port not in taken and port_is_free(port):
            taken.add(port)
            return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            taken.add(port)
            return port


@dataclass(frozen=True)
class Launch:
    """What to start: a component's name, command line, ports and log file."""

    name: str
    argv: list[str]
    ports: dict[str, int]
    log: Path
    # Linux: the process gets SIGTERM when the starting thread dies (a killed pytest run leaves
    # no stack behind). Off for `dev up`, whose processes must outlive the command.
    die_with_parent: bool = False


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: prctl(PR_SET_PDEATHSIG, SIGTERM).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start(launch: Launch) -> ComponentInfo:
    """Start `launch.argv` detached, output appended to its log; return what to record."""
    launch.log.parent.mkdir(parents=True, exist_ok=True)
    with open(launch.log, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(launch.argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            launch.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_die_with_parent if launch.die_with_parent else None,
        )
    _children[proc.pid] = proc
    create_time = psutil.Process(proc.pid).create_time()
    return ComponentInfo(
        name=launch.name,
        pid=proc.pid,
        create_time=create_time,
        ports=dict(launch.ports),
        log=str(launch.log),
        argv=list(launch.argv),
    )


def _reap(pid: int) -> None:
    child = _children.pop(pid, None)
    if child is not None:
        child.poll()


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    return alive


def stop_all(components: Iterable[ComponentInfo], timeout: float = 10.0) -> int:
    """Stop components and their process groups together: SIGTERM, wait, SIGKILL. Idempotent.

    In parallel because each control-plane binary takes seconds to shut down gracefully.
    Returns how many of them were running.
    """
    leaders = [c for c in components if c.is_alive()]
    procs: list[psutil.Process] = []
    for comp in leaders:
        try:
            leader = psutil.Process(comp.pid)
            procs += [leader, *leader.children(recursive=True)]
            os.killpg(comp.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    alive = _wait_gone(procs, timeout)
    for comp in leaders:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(comp.pid, signal.SIGKILL)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _wait_gone(alive, 5.0)
    for comp in leaders:
        _reap(comp.pid)
    return len(leaders)


def stop(component: ComponentInfo, timeout: float = 10.0) -> None:
    """Stop one component and its process group."""
    stop_all([component], timeout)


def stray_processes(state_dir: Path, executables: Iterable[str]) -> list[psutil.Process]:
    """Processes of the stack's executables whose command line mentions `state_dir`.

    The safety net of `dev down`: it finds components that an interrupted `up` started but
    did not record. Only the stack's own executables (and `python -m <module>` of its own
    modules) are matched, never e.g. a worker that was merely pointed at the same state dir.
    """
    names = set(executables)
    marker = str(state_dir.resolve())
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if proc.info["status"] == psutil.STATUS_ZOMBIE or not cmdline:
                continue
            # `python -m <module>` is known by its module (the webhook), a binary by its file name.
            name = cmdline[2] if len(cmdline) > 2 and cmdline[1] == "-m" else Path(cmdline[0]).name
            if name in names and any(marker in arg for arg in cmdline):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def kill_processes(procs: list[psutil.Process]) -> None:
    """SIGTERM, then SIGKILL after a grace period, and reap what we can."""
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    alive = _wait_gone(procs, 10.0)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    _wait_gone(alive, 5.0)
    for proc in procs:
        _reap(proc.pid)


def https_ok(url: str, timeout: float = 2.0) -> bool:
    """True when `url` answers 200 (TLS without verification: a liveness probe, not a trust decision)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when `url` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_until(check: Callable[[], bool], deadline: float, while_alive: ComponentInfo | None = None) -> bool:
    """Poll `check` until it is true (True), the monotonic `deadline` passes or the process dies (False)."""
    while time.monotonic() < deadline:
        if check():
            return True
        if while_alive is not None and not while_alive.is_alive():
            return False
        time.sleep(0.25)
    return check()
