"""What a running local stack looks like on disk (`<state-dir>/stack.json`), and connection defaults.

`noderoll dev up` records every component it started (pid, process start time, ports, log file,
command line) plus the four contract values (`temporal_address`, `temporal_ui`, `kubeconfig`,
`state_dir`). Other commands resolve their Temporal address and kubeconfig with
`resolve_connection`: flags, then environment variables, then a running dev stack.
Reads files and the process table; starts nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

STACK_FILE = "stack.json"
DEFAULT_STATE_DIR = ".noderoll"
STATE_DIR_ENV = "NODEROLL_STATE_DIR"
TEMPORAL_ADDRESS_ENV = "NODEROLL_TEMPORAL_ADDRESS"
KUBECONFIG_ENV = "KUBECONFIG"


@dataclass
class ComponentInfo:
    """One supervised process of the stack as recorded at start."""

    name: str
    pid: int
    # psutil's create_time guards against a recycled pid being mistaken for our process.
    create_time: float
    ports: dict[str, int]
    log: str
    argv: list[str] = field(default_factory=list)

    def is_alive(self) -> bool:
        """True when the recorded process still runs (a zombie counts as dead)."""
        try:
            proc = psutil.Process(self.pid)
            return (
                abs(proc.create_time() - self.create_time) < 1.0
                and proc.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False

    def runs_current_binary(self) -> bool:
        """True unless the executable file was replaced since the start (say, a rebuilt cache)."""
        if not self.argv:
            return True
        try:
            running = os.stat(f"/proc/{self.pid}/exe")
            on_disk = os.stat(self.argv[0])
        except OSError:
            return False
        return (running.st_dev, running.st_ino) == (on_disk.st_dev, on_disk.st_ino)


@dataclass
class StackInfo:
    """The local stack: the contract values of `dev up --json` plus every component."""

    temporal_address: str
    temporal_ui: str
    kubeconfig: str
    state_dir: str
    components: dict[str, ComponentInfo] = field(default_factory=dict)

    def contract(self) -> dict[str, str]:
        """The four keys `noderoll dev up --json` prints (contract)."""
        return {
            "temporal_address": self.temporal_address,
            "temporal_ui": self.temporal_ui,
            "kubeconfig": self.kubeconfig,
            "state_dir": self.state_dir,
        }

    def is_running(self) -> bool:
        """True when at least one component is recorded and every recorded component is alive."""
        return bool(self.components) and all(c.is_alive() for c in self.components.values())

    def to_json(self) -> str:
        """Serialise for `stack.json`."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StackInfo:
        """Parse what `to_json` wrote."""
        components = {
            name: ComponentInfo(**raw) for name, raw in (data.get("components") or {}).items()
        }
        return cls(
            temporal_address=str(data["temporal_address"]),
            temporal_ui=str(data["temporal_ui"]),
            kubeconfig=str(data["kubeconfig"]),
            state_dir=str(data["state_dir"]),
            components=components,
        )


def default_state_dir() -> Path:
    """`$NODEROLL_STATE_DIR`, else `.noderoll/` in the working directory (absolute)."""
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).resolve()


def load_stack_info(state_dir: str | os.PathLike[str] | None = None) -> StackInfo | None:
    """The stack recorded in `state_dir` (default: `default_state_dir()`), or None when there is none.

    A missing or unreadable `stack.json` is "no stack"; whether its processes still run is
    `StackInfo.is_running()`.
    """
    root = Path(state_dir).resolve() if state_dir is not None else default_state_dir()
    try:
        data = json.loads((root / STACK_FILE).read_text())
        return StackInfo.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_stack_info(info: StackInfo) -> None:
    """Write `stack.json` atomically (a reader never sees half a file)."""
    path = Path(info.state_dir) / STACK_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(info.to_json() + "\n")
    tmp.replace(path)


@dataclass(frozen=True)
class Connection:
    """Where a noderoll process connects; None means "not configured" (the caller decides)."""

    temporal_address: str | None
    kubeconfig: str | None
    # Human-readable origin of the values, for log lines such as "using the dev stack in ...".
    source: str


def resolve_connection(
    temporal_address: str | None = None,
    kubeconfig: str | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> Connection:
    """Connection defaults: explicit flags > environment variables > a running dev stack.

    `state_dir` (a flag) or `$NODEROLL_STATE_DIR` or `.noderoll/` names the dev stack consulted
    for any value still missing; a stack whose processes are gone is ignored.
    """
    address = temporal_address or os.environ.get(TEMPORAL_ADDRESS_ENV) or None
    config = kubeconfig or os.environ.get(KUBECONFIG_ENV) or None
    source = "flags/environment"
    if address is None or config is None:
        info = load_stack_info(state_dir)
        if info is not None and info.is_running():
            address = address or info.temporal_address
            config = config or info.kubeconfig
            source = f"dev stack in {info.state_dir}"
    return Connection(temporal_address=address, kubeconfig=config, source=source)
