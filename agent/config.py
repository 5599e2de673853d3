"""Loading and validating a package's `config.json` (NodeWright's v1 schema). Reads files only.

Schema (NodeWright `skyhook-agent-schema.json` v1): `schema_version` "v1", `package_name`,
`package_version`, `expected_config_files` [str], `modes` {mode: [step]}; a step has `name`, `path`,
`arguments`, `returncodes`, `on_host`, `idempotence`, `upgrade_step` and optional `env`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.modes import CHECK_SUFFIX, EXIT_CONFIG_INVALID, EXIT_CONFIG_MISSING, STEP_MODES, is_check

CONFIG_FILE = "config.json"
# NodeWright packages keep executables under skyhook_dir/; noderoll packages may keep them at the top.
STEPS_SUBDIR = "skyhook_dir"
STEP_NAME_RE = re.compile(r"^[a-zA-Z0-9_\-.]+$")
VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?(-[0-9A-Za-z.\-]+)?(\+[0-9A-Za-z.\-]+)?$")
REQUIRED_STEP_KEYS = ("name", "path", "arguments", "returncodes", "on_host", "idempotence", "upgrade_step")


class AgentError(Exception):
    """A failure with a one-line reason and the exit code the agent ends with."""

    def __init__(self, exit_code: int, reason: str) -> None:
        super().__init__(reason)
        self.exit_code = exit_code
        self.reason = reason


@dataclass(frozen=True)
class Step:
    """One executable of a mode, with its arguments and accepted return codes."""

    name: str
    path: str
    arguments: tuple[str, ...] = ()
    returncodes: tuple[int, ...] = (0,)
    on_host: bool = True
    idempotence: bool = False
    upgrade_step: bool = False
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PackageConfig:
    """A parsed, validated config.json."""

    package_name: str
    package_version: str
    expected_config_files: tuple[str, ...]
    modes: dict[str, tuple[Step, ...]]

    def steps(self, mode: str) -> tuple[Step, ...]:
        """The steps of a mode (empty when the package does not define it)."""
        return self.modes.get(mode, ())


def _invalid(reason: str) -> AgentError:
    return AgentError(EXIT_CONFIG_INVALID, f"invalid config.json: {reason}")


def _parse_step(mode: str, index: int, raw: Any) -> Step:
    where = f"modes.{mode}[{index}]"
    if not isinstance(raw, dict):
        raise _invalid(f"{where} is not an object")
    missing = [key for key in REQUIRED_STEP_KEYS if key not in raw]
    if missing:
        raise _invalid(f"{where} lacks {', '.join(missing)}")
    name, path, arguments, codes = raw["name"], raw["path"], raw["arguments"], raw["returncodes"]
    if not isinstance(name, str) or not STEP_NAME_RE.match(name):
        raise _invalid(f"{where}.name {name!r} must match {STEP_NAME_RE.pattern}")
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in Path(path).parts:
        raise _invalid(f"{where}.path {path!r} must be a relative path inside the package")
    if not isinstance(arguments, list) or not all(isinstance(a, str) for a in arguments):
        raise _invalid(f"{where}.arguments must be a list of strings")
    if not isinstance(codes, list) or not codes or not all(type(c) is int for c in codes):
        raise _invalid(f"{where}.returncodes must be a non-empty list of integers")
    flags = {key: raw[key] for key in ("on_host", "idempotence", "upgrade_step")}
    if not all(isinstance(value, bool) for value in flags.values()):
        raise _invalid(f"{where}: on_host, idempotence and upgrade_step must be booleans")
    if flags["upgrade_step"] and mode not in ("upgrade", "upgrade-check"):
        raise _invalid(f"{where}.upgrade_step is only allowed in upgrade modes")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _invalid(f"{where}.env must map strings to strings")
    return Step(
        name=name,
        path=path,
        arguments=tuple(arguments),
        returncodes=tuple(codes),
        on_host=flags["on_host"],
        idempotence=flags["idempotence"],
        upgrade_step=flags["upgrade_step"],
        env=dict(env),
    )


def _parse_modes(raw: Any) -> dict[str, tuple[Step, ...]]:
    if not isinstance(raw, dict):
        raise _invalid("modes must be an object")
    unknown = sorted(set(raw) - set(STEP_MODES))
    if unknown:
        raise _invalid(f"unknown mode(s) {', '.join(unknown)}; allowed: {', '.join(STEP_MODES)}")
    modes: dict[str, tuple[Step, ...]] = {}
    for mode, steps in raw.items():
        if not isinstance(steps, list):
            raise _invalid(f"modes.{mode} must be a list of steps")
        modes[mode] = tuple(_parse_step(mode, i, step) for i, step in enumerate(steps))
    if not any(steps for mode, steps in modes.items() if not is_check(mode)):
        raise _invalid("no mode other than checks has steps")
    for mode, steps in modes.items():
        # NodeWright's rule: work that cannot be checked is refused at load time.
        if steps and not is_check(mode) and not modes.get(mode + CHECK_SUFFIX):
            raise _invalid(f"mode {mode} has steps but {mode}{CHECK_SUFFIX} has none")
    return modes


def parse_config(raw: Any) -> PackageConfig:
    """Validate a decoded config.json document. Pure; raises AgentError(EXIT_CONFIG_INVALID)."""
    if not isinstance(raw, dict):
        raise _invalid("top level must be an object")
    if raw.get("schema_version") != "v1":
        raise _invalid(f"schema_version must be \"v1\", got {raw.get('schema_version')!r}")
    name, version = raw.get("package_name"), raw.get("package_version")
    if not isinstance(name, str) or not name:
        raise _invalid("package_name must be a non-empty string")
    if not isinstance(version, str) or not VERSION_RE.match(version):
        raise _invalid(f"package_version {version!r} is not a version")
    expected = raw.get("expected_config_files", [])
    if not isinstance(expected, list) or not all(isinstance(item, str) for item in expected):
        raise _invalid("expected_config_files must be a list of strings")
    return PackageConfig(name, version, tuple(expected), _parse_modes(raw.get("modes")))


def load_config(package_dir: Path) -> PackageConfig:
    """Read and validate `<package_dir>/config.json`."""
    path = package_dir / CONFIG_FILE
    if not path.is_file():
        raise AgentError(EXIT_CONFIG_MISSING, f"no {CONFIG_FILE} in package directory {package_dir}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AgentError(EXIT_CONFIG_INVALID, f"cannot read {path}: {err}") from err
    return parse_config(raw)


def step_file(package_dir: Path, step: Step) -> Path:
    """Where a step's executable lives: `skyhook_dir/<path>` (NodeWright layout) or `<path>`."""
    nodewright = package_dir / STEPS_SUBDIR / step.path
    return nodewright if nodewright.exists() else package_dir / step.path
