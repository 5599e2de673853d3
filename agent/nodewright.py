"""NodeWright's traces on a host: its step flags and install history. Reads host files; names are pure.

A node migrated from NodeWright carries, under each NodeWright state root (`SKYHOOK_ROOT_DIR`: the
operator's `/var/lib/skyhook/<skyhook>`, the agent's default `/etc/skyhook`):

* `flags/<package_name>/<package_version>/<flag>`: one file per completed step, where `<flag>` is
  `<path>_<base64("<arguments>_<returncodes>")>` (the Python agent, the lists in Python's repr) or
  `<basename(path)>-<sha256 hex>.flag` (the Go agent: SHA-256 of the JSON of path, arguments,
  return codes, env and on_host, as Go's encoding/json writes it);
* `history/<package_name>.json`: `{"current-version": ..., "history": [...]}`.

Package name and version are config.json's, as NodeWright's agent keys them. noderoll reads both so
that a step with `idempotence: false` that NodeWright already completed is not run again, and an
upgrade step learns the version NodeWright installed. It never writes there.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from agent.config import PackageConfig, Step
from agent.host import Host

STATE_DIRS_ENV = "NODEROLL_NODEWRIGHT_STATE_DIRS"
# NodeWright's operator default COPY_DIR_ROOT is /var/lib/skyhook (one folder per Skyhook under it);
# its agent's own default SKYHOOK_ROOT_DIR is /etc/skyhook.
DEFAULT_STATE_DIRS = ("/var/lib/skyhook/*", "/etc/skyhook")
_GO_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def python_flag_name(step: Step) -> str:
    """The flag file of a completed step as NodeWright's Python agent names it. Pure."""
    marker = f"{list(step.arguments)}_{list(step.returncodes)}"
    return f"{step.path}_{base64.b64encode(marker.encode('utf-8')).decode('utf-8')}"


def _go_string(text: str) -> str:
    """A JSON string as Go's encoding/json writes it (HTML-safe escapes included). Pure."""
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif ord(char) < 0x20 or char in "<>&\u2028\u2029":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def go_fingerprint_json(step: Step) -> str:
    """The JSON document NodeWright's Go agent hashes for a step's flag. Pure."""
    arguments = ",".join(_go_string(a) for a in step.arguments)
    codes = ",".join(str(c) for c in step.returncodes)
    env = ",".join(f"{_go_string(k)}:{_go_string(v)}" for k, v in sorted(step.env.items()))
    return (f'{{"path":{_go_string(step.path)},"arguments":[{arguments}],"returnCodes":[{codes}],'
            f'"env":{{{env}}},"onHost":{"true" if step.on_host else "false"}}}')


def go_flag_name(step: Step) -> str:
    """The flag file of a completed step as NodeWright's Go agent names it. Pure."""
    digest = hashlib.sha256(go_fingerprint_json(step).encode("utf-8")).hexdigest()
    return f"{PurePosixPath(step.path).name}-{digest}.flag"


def state_dirs(host: Host) -> list[Path]:
    """NodeWright state roots present on the host (agent-side paths)."""
    configured = os.environ.get(STATE_DIRS_ENV)
    patterns = configured.split(":") if configured is not None else [
        *([os.environ["SKYHOOK_ROOT_DIR"]] if os.environ.get("SKYHOOK_ROOT_DIR") else []), *DEFAULT_STATE_DIRS]
    found: list[Path] = []
    for pattern in filter(None, patterns):
        for match in sorted(glob.glob(str(host.root / pattern.lstrip("/")))):
            if Path(match).is_dir() and Path(match) not in found:
                found.append(Path(match))
    return found


def completed_flag(host: Host, config: PackageConfig, step: Step) -> Path | None:
    """The NodeWright flag saying this step already completed on this host, if there is one."""
    for state in state_dirs(host):
        folder = state / "flags" / config.package_name / config.package_version
        for name in (python_flag_name(step), go_flag_name(step)):
            if (folder / name).is_file():
                return folder / name
    return None


def installed_version(host: Host, config: PackageConfig) -> str:
    """The `current-version` NodeWright recorded for the package on this host ("" when none)."""
    for state in state_dirs(host):
        try:
            data: Any = json.loads((state / "history" / f"{config.package_name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("current-version"), str) and data["current-version"]:
            return str(data["current-version"])
    return ""
