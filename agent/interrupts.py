"""Performing an interrupt (reboot, service restarts) on the host, or recording it in simulation. Host I/O.

The request comes as JSON in `NODEROLL_INTERRUPT`: `{"type": "reboot"|"service"|"restartAllServices"|
"noop", "services": [...]}`, or in NodeWright's form, the same JSON base64-encoded (as the 4th
positional argument or in `NODEROLL_INTERRUPT`). NodeWright's agent names `node_restart`,
`service_restart`, `restart_all_services`, `no_op` are accepted too, and its `script_interrupt`
(the package's own steps did the interrupt) runs no command, like `noop`. Every interrupt is appended as a JSON line to
`<root>/var/lib/noderoll/interrupts.log`; restarted services also to `restarted-services.log`.
In simulation nothing else happens (fleetsim performs the reboot itself); on a real host the
commands run inside the host root: the agent enters it itself (`os.chroot` in the child), so no
`chroot` binary is needed in the agent image or on its PATH.

A failed command fails the interrupt with its exit code and the tail of its output. A reboot counts
as done only when the shutdown itself stops it: `systemctl reboot` killed by SIGTERM, or the agent
receiving SIGTERM within `NODEROLL_REBOOT_WAIT_SECONDS` after `systemctl reboot` exited 0 (it only
queues the shutdown). A reboot command that exits 0 and nothing follows is a failure, as is one that
exits non-zero or does not exist (NodeWright's agent reads the same signal the same way).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agent.config import AgentError
from agent.host import INTERRUPTS_LOG, RESTARTED_SERVICES_LOG, Host
from agent.modes import (
    EXIT_HOST,
    EXIT_INTERRUPT_INVALID,
    EXIT_REBOOT_NOT_DONE,
    EXIT_STEP_FAILED,
    EXIT_STEP_NOT_FOUND,
)

INTERRUPT_ENV = "NODEROLL_INTERRUPT"
REBOOT_WAIT_ENV = "NODEROLL_REBOOT_WAIT_SECONDS"
# systemd stops units before it signals the remaining processes: give it time before calling the
# reboot a failure (NodeWright's agent waits 10 s; a loaded GPU node can take longer).
DEFAULT_REBOOT_WAIT_SECONDS = 120.0
# Commands run inside the host root with the host's usual PATH, not the agent image's.
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TAIL_LINES = 5
TYPES = ("noop", "service", "restartAllServices", "reboot")
NODEWRIGHT_ALIASES = {
    "no_op": "noop",
    "service_restart": "service",
    "restart_all_services": "restartAllServices",
    "node_restart": "reboot",
    "script_interrupt": "noop",
}


@dataclass(frozen=True)
class Interrupt:
    """One merged interrupt for a node."""

    type: str
    services: tuple[str, ...] = ()


def _decode(text: str) -> object:
    """JSON, or NodeWright's base64-encoded JSON. Pure."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        try:
            return json.loads(base64.b64decode(text.strip(), validate=True).decode("utf-8"))
        except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError):
            raise AgentError(EXIT_INTERRUPT_INVALID, f"the interrupt is neither JSON nor base64 JSON: {err}") from err


def parse_interrupt(text: str | None) -> Interrupt:
    """Decode the interrupt (JSON or base64 JSON). Pure; raises AgentError(EXIT_INTERRUPT_INVALID)."""
    if not text:
        raise AgentError(EXIT_INTERRUPT_INVALID, f"mode interrupt needs {INTERRUPT_ENV} (JSON with a type) "
                                                 "or NodeWright's base64 JSON argument")
    raw = _decode(text)
    if not isinstance(raw, dict):
        raise AgentError(EXIT_INTERRUPT_INVALID, f"{INTERRUPT_ENV} must be a JSON object")
    kind = NODEWRIGHT_ALIASES.get(raw.get("type"), raw.get("type"))
    if kind not in TYPES:
        raise AgentError(EXIT_INTERRUPT_INVALID, f"unknown interrupt type {raw.get('type')!r}; known: {', '.join(TYPES)}")
    services = raw.get("services") or []
    if not isinstance(services, list) or not all(isinstance(s, str) and s for s in services):
        raise AgentError(EXIT_INTERRUPT_INVALID, "interrupt services must be a list of unit names")
    if kind == "service" and not services:
        raise AgentError(EXIT_INTERRUPT_INVALID, "a service interrupt needs at least one service")
    return Interrupt(kind, tuple(services))


def commands(interrupt: Interrupt) -> list[list[str]]:
    """The host commands an interrupt runs (inside the host root). Pure."""
    if interrupt.type == "reboot":
        return [["systemctl", "reboot"]]
    if interrupt.type == "service":
        return [["systemctl", "daemon-reload"], *(["systemctl", "restart", s] for s in interrupt.services)]
    if interrupt.type == "restartAllServices":
        # NodeWright's meaning of restartAllServices: reload kernel parameters (procps), not every unit.
        return [["systemctl", "daemon-reload"], ["service", "procps", "force-reload"]]
    return []


def output_tail(output: str, lines: int = TAIL_LINES) -> str:
    """The last non-empty lines of a command's output, joined for a one-line reason. Pure."""
    kept = [line.strip() for line in output.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "no output"


def command_failure(argv: list[str], code: int, output: str) -> AgentError:
    """The failure of a host command: its exit code (128+N when killed by signal N) and output. Pure."""
    command = " ".join(argv)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        return AgentError(128 - code, f"{command} was killed by {name}: {output_tail(output)}")
    return AgentError(code if 0 < code < 256 else EXIT_STEP_FAILED, f"{command} exited {code}: {output_tail(output)}")


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def run_in_host(host: Host, argv: list[str]) -> tuple[int, str]:
    """Run a command inside the host root; (return code, output). Negative: killed by that signal.

    The child enters the root with os.chroot (no `chroot` binary needed) and has SIGTERM unblocked
    even while the agent blocks it to wait for a shutdown."""
    if host.chroot and os.geteuid() != 0:
        raise AgentError(EXIT_HOST, f"entering the host root {host.root} needs root (uid {os.geteuid()})")

    def enter_root() -> None:  # runs in the child between fork and exec
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        if host.chroot:
            os.chroot(host.root)
            os.chdir("/")

    env = {**os.environ, "PATH": HOST_PATH}
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            cwd=None if host.chroot else str(host.root),
            preexec_fn=enter_root,  # noqa: PLW1509 - the agent is single-threaded
        )
    except FileNotFoundError as err:
        raise AgentError(EXIT_STEP_NOT_FOUND, f"{' '.join(argv)}: {argv[0]} not found in the host root {host.root}") from err
    except (OSError, subprocess.SubprocessError) as err:
        raise AgentError(EXIT_HOST, f"{' '.join(argv)}: cannot start in the host root {host.root}: {err}") from err
    assert proc.stdout is not None
    lines: list[str] = []
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip()
        lines.append(line)
        sys.stdout.write(f"[interrupt] {line}\n")
        sys.stdout.flush()
    return proc.wait(), "\n".join(lines)


def _reboot_wait_seconds() -> float:
    raw = os.environ.get(REBOOT_WAIT_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_REBOOT_WAIT_SECONDS
    except ValueError as err:
        raise AgentError(EXIT_INTERRUPT_INVALID, f"{REBOOT_WAIT_ENV}={raw!r} is not a number of seconds") from err


def _say(message: str) -> None:
    sys.stdout.write(f"noderoll-agent: {message}\n")
    sys.stdout.flush()


def reboot(host: Host, argv: list[str]) -> None:
    """Ask the host to reboot; return only once the shutdown has begun (see the module docstring)."""
    wait = _reboot_wait_seconds()
    # SIGTERM stays pending while blocked: one that arrives while systemctl runs is not lost.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        code, output = run_in_host(host, argv)
        if code == -signal.SIGTERM:
            _say(f"{' '.join(argv)} was stopped by SIGTERM: the host is shutting down")
            return
        if code != 0:
            raise command_failure(argv, code, output)
        _say(f"{' '.join(argv)} accepted; waiting up to {wait:g}s for the shutdown to stop this agent")
        if signal.sigtimedwait({signal.SIGTERM}, wait) is not None:
            _say("SIGTERM received: the host is shutting down")
            return
        raise AgentError(EXIT_REBOOT_NOT_DONE, f"{' '.join(argv)} exited 0 but the host did not shut down "
                                               f"within {wait:g}s: {output_tail(output)}")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def perform(interrupt: Interrupt, host: Host, simulate: bool) -> None:
    """Record the interrupt under the root, then (on a real host) run its commands in the host root."""
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "type": interrupt.type,
        "services": list(interrupt.services),
        "package": os.environ.get("NODEROLL_PACKAGE", ""),
        "version": os.environ.get("NODEROLL_VERSION", ""),
        "simulated": simulate,
    }
    _append(host.state_root / INTERRUPTS_LOG, json.dumps(record))
    for service in interrupt.services if interrupt.type == "service" else ():
        _append(host.state_root / RESTARTED_SERVICES_LOG, service)
    if simulate:
        return
    for argv in commands(interrupt):
        if interrupt.type == "reboot":
            reboot(host, argv)
            continue
        code, output = run_in_host(host, argv)
        if code != 0:
            raise command_failure(argv, code, output)
