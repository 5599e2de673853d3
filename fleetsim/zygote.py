"""The agent zygote: one warm Python process that forks a confined agent run per stage container. Forks.

Issue #14: fleetsim used to start `python -m agent` (a new interpreter, its imports) for every
container of every stage pod, on the same cores as the apiserver and noderoll: the benchmark partly
measured the simulator. This process starts once per fleet, imports the agent, and serves requests
from fleetsim over a Unix socket (`fleetsim.agents` is the client): each request carries the
agent's arguments, environment and working directory, and the write end of a pipe for its output
(`SCM_RIGHTS`). The zygote forks; the child points stdout and stderr at the pipe, takes the
environment and runs `agent.cli.main` in-process, then exits with its code. Forking a warm,
single-threaded process costs a few milliseconds; an interpreter start costs ~100 ms of CPU.

Confinement is unchanged and per run: the child is a fresh single-threaded process, so the agent's
`--simulate` enters its own mount (and, not as root, user) namespace and chroots its steps into the
node's sandbox exactly as a separately started agent did (agent/sandbox.py): nothing a run does to
its namespace reaches the zygote, the next run or the machine. The zygote itself never enters a
namespace and never runs a step.

Messages (JSON, one per datagram): request `{"id", "argv", "env", "cwd"}` with the pipe's fd; the
zygote answers `{"id", "pid"}` once forked and `{"id", "exit"}` (the exit code; -N for signal N)
when the child ends. It exits when the socket closes (fleetsim stopped or died).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
from typing import Any

MAX_MESSAGE = 1 << 20


def _child(request: dict[str, Any], out: int) -> None:
    """In the forked child: become the agent run and never return."""
    code = 70
    try:
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()  # its own process group: the step processes it starts die with it on SIGKILL
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, 65536)  # the zygote's socket and pipes: nothing of the zygote stays open
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from agent.cli import main  # noqa: PLC0415 - imported by the zygote already: a dict lookup

        sys.argv = ["agent", *request["argv"]]
        code = main(request["argv"])
    except BaseException as err:  # noqa: BLE001 - the child must end here, whatever happened
        os.write(2, f"noderoll-agent: FAILED: fleetsim zygote child: {err!r}\n".encode())
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class Zygote:
    """The request loop (single-threaded: fork is safe here)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: dict[int, str] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    def _send(self, message: dict[str, Any]) -> None:
        self.sock.send(json.dumps(message).encode())

    def _spawn(self, request: dict[str, Any], out: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, out)
        os.close(out)
        self.children[pid] = str(request["id"])
        self._send({"id": request["id"], "pid": pid})

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            ident = self.children.pop(pid, None)
            if ident is not None:
                self._send({"id": ident, "exit": os.waitstatus_to_exitcode(status)})

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select(timeout=1.0):
                if key.fileobj is self.sock:
                    data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, 1)
                    if not data:
                        return  # fleetsim is gone
                    if fds:
                        self._spawn(json.loads(data), fds[0])
                else:
                    try:
                        os.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
            self._reap()


def main(argv: list[str]) -> int:
    """`python -m fleetsim.zygote <socket fd>`: serve until the socket closes."""
    import agent.cli  # noqa: F401, PLC0415 - warm: every import the agent needs, once

    sock = socket.socket(fileno=int(argv[0]))
    Zygote(sock).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
