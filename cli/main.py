"""The `noderoll` console script: a thin dispatcher over per-feature command modules.

Each command module exposes `register(subparsers) -> None`, adding its sub-command(s) with
`set_defaults(func=...)` where `func(args) -> int` is the exit code. Modules are imported lazily
so that a broken optional feature cannot stop `noderoll dev up` from working. A command listed in
`STANDALONE` is parsed with its own module only: `noderoll webhook` must not import the worker's
workflows and activities (it starts fast and shares no code path with them), `noderoll import`
(a file converter) needs nothing but `api`, and the operator's commands (`status`, `nodes`, `logs`, the
signals, `plan`) start without the other commands' modules.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence

from cli.process_exit import exit_process

# Order here is the order in `noderoll --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "demo.command",
    "localstack.commands",
    "api.validate_command",
    "api.import_command",
    "fleetsim.command",
    "worker.run_worker",
    "crd_bridge.command",
    "webhook.command",
    "cli.ops_commands",
    "cli.plan_command",
    "cli.report_command",
    "cli.node_commands",
    "cli.migrate_command",
    "bench.command",
)

# Command name -> the only module its process imports. The operator's commands too: `noderoll status` answers
# sooner without importing the bridge, the bench and the demo (issue 45: 1.43 -> 0.95 s of start-up here).
_OPS = ("cli.ops_commands",)
STANDALONE: dict[str, tuple[str, ...]] = {
    "webhook": ("webhook.command",), "import": ("api.import_command",), "plan": ("cli.plan_command",),
    **{command: _OPS for command in ("status", "nodes", "logs", "pause", "resume", "halt", "retry")},
}


def modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules to load for `argv`: a standalone command's own, else every one."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return STANDALONE.get(first or "", COMMAND_MODULES)


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """Build the argument parser from the command modules (default: every one that is present)."""
    parser = argparse.ArgumentParser(
        prog="noderoll",
        description="Roll host-OS changes across GPU node fleets, durably (Temporal) and safely (Kubernetes).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            # Only a missing command module itself is tolerated; a missing dependency inside it is a bug.
            if err.name == name:
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `noderoll` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(modules_for(arguments))
    args = parser.parse_args(arguments)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The console script's entry point: `main`, then an exit that cannot abort (cli.process_exit).

    Everything `sys.exit(main())` would do, the same way: argparse's `SystemExit` keeps its code, a
    message code is printed and exits 1, an uncaught exception prints its traceback and exits 1.
    """
    try:
        code: int | str | None = main()
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 - reported exactly as the interpreter would, then exit 1
        traceback.print_exc()
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    exit_process(code or 0)


if __name__ == "__main__":
    run()
