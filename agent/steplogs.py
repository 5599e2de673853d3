"""Per-step log files on the host, with rotation (NodeWright keeps its step logs the same way). File I/O.

Each run of a step writes `<root>/var/log/noderoll/steps/<package>/<version>/<step path>-<UTC time>.log`
(stdout and stderr merged, each line prefixed with its UTC time); only the newest `KEEP` logs of a
step are kept. `NODEROLL_AGENT_WRITE_LOGS=false` (or NodeWright's `SKYHOOK_AGENT_WRITE_LOGS=false`)
turns the files off; the pod log gets every line either way.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from agent.host import Host

LOG_SUBDIR = Path("var/log/noderoll/steps")
KEEP = 5
WRITE_LOGS_ENVS = ("NODEROLL_AGENT_WRITE_LOGS", "SKYHOOK_AGENT_WRITE_LOGS")
_STAMP = "%Y-%m-%d-%H%M%S-%f"
_STAMP_RE = r"\d{4}-\d{2}-\d{2}-\d{6}-\d{6}"


def enabled() -> bool:
    """False when either switch says `false`."""
    return all(os.environ.get(name, "true").lower() != "false" for name in WRITE_LOGS_ENVS)


def log_dir(host: Host, package: str, version: str) -> Path:
    """Where a package version's step logs live (agent-side path)."""
    return host.root / LOG_SUBDIR / package / version


def log_path(folder: Path, step_path: str, at: datetime) -> Path:
    """The log file of one run of a step. Pure."""
    return folder / f"{step_path}-{at.strftime(_STAMP)}.log"


def rotate(folder: Path, step_path: str, keep: int = KEEP) -> list[Path]:
    """Delete all but the newest `keep` logs of the step; returns what was deleted."""
    target = folder / step_path
    pattern = re.compile(rf"^{re.escape(target.name)}-{_STAMP_RE}\.log$")
    logs = sorted(p for p in target.parent.glob(f"{target.name}-*.log") if pattern.match(p.name))
    stale = logs[:-keep] if keep else logs
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


class StepLog:
    """One step run's log file (a no-op when logs are turned off)."""

    def __init__(self, folder: Path, step_path: str) -> None:
        self.folder, self.step_path = folder, step_path
        self.handle: TextIO | None = None
        if enabled():
            path = log_path(folder, step_path, datetime.now(UTC))
            path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = path.open("w", encoding="utf-8")

    def write(self, line: str) -> None:
        """Append one line, prefixed with the time."""
        if self.handle is not None:
            self.handle.write(f"{datetime.now(UTC).isoformat()} {line}\n")

    def close(self) -> None:
        """Close the file and drop the step's oldest logs."""
        if self.handle is not None:
            self.handle.close()
            rotate(self.folder, self.step_path)
