"""Performing an interrupt (reboot, service restarts) on the host, or recording it in simulation. Host I/O.

The request comes as JSON in `NODEROLL_INTERRUPT`: `{"type": "reboot"|"service"|"restartAllServices"|
"noop", "services": [...]}` (NodeWright's agent names `node_restart`, `service_restart`,
`restart_all_services` and `no_op` are accepted too). Every interrupt is appended as a JSON line to
`<root>/var/lib/noderoll/interrupts.log`; restarted services also to `restarted-services.log`.
In simulation nothing else happens (fleetsim performs the reboot itself); on a real host the
commands run inside the host root with chroot.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agent.config import AgentError
from agent.host import INTERRUPTS_LOG, RESTARTED_SERVICES_LOG, Host
from agent.modes import EXIT_INTERRUPT_INVALID

INTERRUPT_ENV = "NODEROLL_INTERRUPT"
TYPES = ("noop", "service", "restartAllServices", "reboot")
NODEWRIGHT_ALIASES = {
    "no_op": "noop",
    "service_restart": "service",
    "restart_all_services": "restartAllServices",
    "node_restart": "reboot",
}


@dataclass(frozen=True)
class Interrupt:
    """One merged interrupt for a node."""

    type: str
    services: tuple[str, ...] = ()


def parse_interrupt(text: str | None) -> Interrupt:
    """Decode the NODEROLL_INTERRUPT JSON. Pure; raises AgentError(EXIT_INTERRUPT_INVALID)."""
    if not text:
        raise AgentError(EXIT_INTERRUPT_INVALID, f"mode interrupt needs {INTERRUPT_ENV} (JSON with a type)")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise AgentError(EXIT_INTERRUPT_INVALID, f"{INTERRUPT_ENV} is not JSON: {err}") from err
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


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def perform(interrupt: Interrupt, host: Host, simulate: bool) -> None:
    """Record the interrupt under the root, then (on a real host) run its commands in the chroot."""
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
        root = str(host.root)
        result = subprocess.run(["chroot", root, *argv], check=False)
        # A reboot may kill us with SIGTERM before `systemctl` returns: that is success, not failure.
        if result.returncode != 0 and interrupt.type != "reboot":
            raise AgentError(result.returncode, f"{' '.join(argv)} exited {result.returncode}")
