"""A minimal host root for agent tests: a real directory a real chroot can enter. Does file I/O.

`a_host_root(path)` copies this machine's `/bin/sh` and the shared libraries it links (found with
`ldd`) into `path`, so a command of the agent run with `--root path` (and without `--simulate`)
really runs in a chroot of a host that is not this machine. `add_command` puts a shell script on
that host's PATH, e.g. a `systemctl` that exits 1 the way it does without systemd.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

_LDD_PATH = re.compile(r"(/\S+)")


def can_chroot() -> str:
    """"" when this process may chroot, else the reason a test should skip."""
    return "" if os.geteuid() == 0 else f"chroot needs root (uid {os.geteuid()})"


def _linked_files(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False).stdout
    return [m.group(1) for line in out.splitlines() if (m := _LDD_PATH.search(line.split("=>")[-1]))]


def add_binary(root: Path, program: str, as_path: str = "") -> Path:
    """Copy this machine's `program` (found on PATH) and its libraries into the root, at `as_path`
    (default: where it is on this machine)."""
    found = shutil.which(program)
    if found is None:
        raise FileNotFoundError(f"{program} is not installed on this machine")
    binary = os.path.realpath(found)
    for source in _linked_files(binary):
        target = root / source.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(source), target)
    target = root / (as_path or binary).lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    return target


def a_host_root(path: Path) -> Path:
    """A directory holding /bin/sh (and its libraries) and an empty /usr/bin: a host to chroot into."""
    add_binary(path, "sh", "/bin/sh")
    (path / "usr/bin").mkdir(parents=True, exist_ok=True)
    return path


def add_command(root: Path, name: str, script: str) -> Path:
    """A `/usr/bin/<name>` shell script in the root (runs with the root's /bin/sh)."""
    target = root / "usr/bin" / name
    target.write_text("#!/bin/sh\n" + script + "\n")
    target.chmod(0o755)
    return target
