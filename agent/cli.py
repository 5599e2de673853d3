"""`python -m agent <mode>`: the entry point of a package pod. Reads files, runs steps on the host.

Precedence: command-line flags, then environment (`NODEROLL_ROOT`, `NODEROLL_PACKAGE_DIR`,
`NODEROLL_CONFIG_DIR`, `NODEROLL_NODE_METADATA_DIR`, `NODEROLL_SIMULATE`), then defaults (`/host`,
`/noderoll-package` or NodeWright's `/skyhook-package`, `/noderoll-config`, `/noderoll-node-metadata`).
NodeWright's positional form `<mode> <root_mount> <copy_dir> [<interrupt_data>]` is accepted too:
the package is then `<root_mount>/<copy_dir>` when that holds a config.json, and the interrupt comes
as base64 JSON. On failure the last line on stderr is `noderoll-agent: FAILED: <reason>` and the exit
code is the step's (or the interrupt command's), or one of `agent.modes.EXIT_*`.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from agent import sandbox
from agent.config import CONFIG_FILE, AgentError, load_config
from agent.host import Host
from agent.interrupts import INTERRUPT_ENV, parse_interrupt, perform
from agent.modes import ALL_MODES, EXIT_HOST, EXIT_INTERNAL, EXIT_USAGE, INTERRUPT_MODE, is_check
from agent.runner import RunRequest, run_mode, say

DEFAULT_ROOT = "/host"
PACKAGE_DIRS = ("/noderoll-package", "/skyhook-package")
DEFAULT_CONFIG_DIR = "/noderoll-config"
DEFAULT_METADATA_DIR = "/noderoll-node-metadata"
TRUTHY = ("1", "true", "yes")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AgentError(EXIT_USAGE, message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m agent", description="Run one mode of a noderoll/NodeWright package.")
    parser.add_argument("mode", help=f"one of: {', '.join(ALL_MODES)}")
    parser.add_argument("root_mount", nargs="?", help="NodeWright form: the host root (as --root)")
    parser.add_argument("copy_dir", nargs="?", help="NodeWright form: the package folder, relative to the root")
    parser.add_argument("interrupt_data", nargs="?", help="NodeWright form: the interrupt as base64 JSON")
    parser.add_argument("--root", help="host root (default $NODEROLL_ROOT or /host)")
    parser.add_argument("--package-dir", help="package folder with config.json (default /noderoll-package)")
    parser.add_argument("--config-dir", help="package config files (default $NODEROLL_CONFIG_DIR or /noderoll-config)")
    parser.add_argument("--node-metadata-dir",
                        help="the node's labels.json, annotations.json, packages.json "
                             "(default $NODEROLL_NODE_METADATA_DIR or /noderoll-node-metadata)")
    parser.add_argument("--simulate", action="store_true",
                        help="the root is a sandbox: steps confined to it, interrupts only recorded")
    return parser


def _package_dir(flag: str | None, root: Path, copy_dir: str | None) -> Path:
    if flag or os.environ.get("NODEROLL_PACKAGE_DIR"):
        return Path(flag or os.environ["NODEROLL_PACKAGE_DIR"])
    candidates = [str(root / copy_dir.lstrip("/"))] if copy_dir else []
    for candidate in [*candidates, *PACKAGE_DIRS]:
        if (Path(candidate) / CONFIG_FILE).is_file():
            return Path(candidate)
    return Path(PACKAGE_DIRS[0])


def _optional_dir(flag: str | None, env: str, default: str, legacy: Path) -> Path | None:
    """A flag, else the variable, else the default; else NodeWright's folder inside the package."""
    chosen = flag or os.environ.get(env) or default
    if Path(chosen).is_dir():
        return Path(chosen)
    return legacy if legacy.is_dir() else None


def run(argv: Sequence[str]) -> int:
    """Parse arguments and run the mode; returns the exit code (raises AgentError on failure)."""
    args = _parser().parse_args(argv)
    if args.mode not in ALL_MODES:
        raise AgentError(EXIT_USAGE, f"unknown mode {args.mode!r}; known: {', '.join(ALL_MODES)}")
    simulate = args.simulate or os.environ.get("NODEROLL_SIMULATE", "").lower() in TRUTHY
    root = Path(args.root or args.root_mount or os.environ.get("NODEROLL_ROOT") or DEFAULT_ROOT).resolve()
    host = Host(root=root, chroot=root != Path("/"))
    if args.mode == INTERRUPT_MODE:
        interrupt = parse_interrupt(args.interrupt_data or os.environ.get(INTERRUPT_ENV))
        say(f"interrupt {interrupt.type} {' '.join(interrupt.services)}".rstrip())
        perform(interrupt, host, simulate)
        return 0
    if is_check(args.mode) and args.mode.startswith(INTERRUPT_MODE):
        say("interrupt-check has no steps: nothing to do")
        return 0
    package_dir = _package_dir(args.package_dir, root, args.copy_dir).resolve()
    config = load_config(package_dir)
    request = RunRequest(
        mode=args.mode,
        config=config,
        package=os.environ.get("NODEROLL_PACKAGE") or config.package_name,
        version=os.environ.get("NODEROLL_VERSION") or config.package_version,
        package_dir=package_dir,
        config_dir=_optional_dir(args.config_dir, "NODEROLL_CONFIG_DIR", DEFAULT_CONFIG_DIR, package_dir / "configmaps"),
        host=host,
        metadata_dir=_optional_dir(args.node_metadata_dir, "NODEROLL_NODE_METADATA_DIR", DEFAULT_METADATA_DIR,
                                   package_dir / "node-metadata"),
    )
    if simulate and request.config.steps(request.mode) and root.is_dir():
        sandbox.confine(root)  # before any step: a simulated node's steps never reach this machine
    return run_mode(request)


def _failed(exit_code: int, reason: str) -> int:
    sys.stdout.flush()
    sys.stderr.write(f"noderoll-agent: FAILED: {reason}\n")
    sys.stderr.flush()
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry: run, and end every failure with its one-line reason and a documented exit code.

    Host I/O errors nobody anticipated (a read-only or full host disk) count as an unusable host;
    anything else is a defect of the agent: its traceback is printed first, for the bug report."""
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except AgentError as err:
        return _failed(err.exit_code, err.reason)
    except OSError as err:
        return _failed(EXIT_HOST, f"host I/O failed: {err}")
    except Exception as err:  # noqa: BLE001 - the last line must still say FAILED
        traceback.print_exc()
        return _failed(EXIT_INTERNAL, f"internal error: {type(err).__name__}: {err}")
