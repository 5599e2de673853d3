"""`noderoll status|pause|resume|halt|retry|nodes|logs`: drive rollouts without the Temporal CLI. Does I/O.

Contract names (issue 7): `status [PACKAGE]` (table, or `-o json`), `pause PACKAGE`, `resume PACKAGE`,
`halt PACKAGE`, `retry PACKAGE [--node N]`, `nodes`, `logs PACKAGE --node N`. The commands signal and
query `package/<name>` and read Packages, Nodes and stage pods, like the bridge (see
`worker.ops_client`). Exit codes: 0 done, 1 refused or not configured (the message says which), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from api import keys
from worker import progress_view
from worker.ops_client import Ops, OpsError, PackageView, drain_blocks, target_from_args

SIGNAL_HELP = {
    keys.SIGNAL_PAUSE: "pause a rollout: no new batch starts; nodes already handed over finish "
                       "(also sets the Package's noderoll.io/pause annotation)",
    keys.SIGNAL_RESUME: "resume a paused or halted rollout, promote a canary awaiting manual promotion "
                        "(also removes the noderoll.io/pause annotation)",
    keys.SIGNAL_HALT: "halt a rollout: requests not yet started on their node are withdrawn",
}
SIGNAL_DONE = {
    keys.SIGNAL_PAUSE: "no new batch will start; `noderoll resume {p}` continues",
    keys.SIGNAL_RESUME: "the rollout continues",
    keys.SIGNAL_HALT: "requests not yet started are withdrawn; `noderoll resume {p}` or `retry` continues",
}


def _console() -> Console:
    # A wide virtual terminal when piped, so tables are not folded into unreadable columns.
    return Console(width=None if sys.stdout.isatty() else 200)


def _run(args: argparse.Namespace, body: Callable[[Ops], Awaitable[int]]) -> int:
    """Connect, run `body`, close; OpsError becomes a one-line message and exit code."""

    async def main() -> int:
        ops = await Ops.connect(target_from_args(args))
        try:
            return await body(ops)
        finally:
            ops.close()

    try:
        return asyncio.run(main())
    except OpsError as err:
        print(f"noderoll {args.command}: {err}", file=sys.stderr)
        return 1


async def _views(ops: Ops, package: str | None) -> list[PackageView]:
    if package:
        view = await ops.package_view(package)
        view.limits = await asyncio.to_thread(ops.package_limits, package)
        views = [view]
    else:
        names = [obj["metadata"]["name"] for obj in await asyncio.to_thread(ops.list_packages)]
        views = [await ops.package_view(name) for name in names]
    # Drains that wait are read from the Nodes, like the bridge does: the rollout learns of a
    # node only when its window ends.
    nodes = await asyncio.to_thread(ops.list_nodes)
    for view in views:
        view.drain_blocked = drain_blocks(view.name, nodes)
    return views


def cmd_status(args: argparse.Namespace) -> int:
    """`status [PACKAGE]`."""

    async def body(ops: Ops) -> int:
        views = await _views(ops, args.package)
        if args.output == "json":
            data: Any = progress_view.progress_json(views[0]) if args.package else [
                progress_view.progress_json(v) for v in views]
            print(json.dumps(data, indent=2, sort_keys=True))
        elif args.package:
            _console().print(progress_view.package_detail(views[0]))
        elif views:
            _console().print(progress_view.status_table(views))
        else:
            print("no Packages in the cluster (kubectl apply -f deploy/examples/package-sysctl-tuning.yaml)")
        return 0

    return _run(args, body)


async def _pause_switch(ops: Ops, package: str, name: str) -> None:
    """Pause and resume also set the Package's pause annotation, so the bridge agrees with the signal.

    The bridge maps `spec.paused` and the annotation to pause/resume whenever it reconciles; a bare
    signal would be undone by its next reconcile, the annotation is not.
    """
    if name not in (keys.SIGNAL_PAUSE, keys.SIGNAL_RESUME):
        return
    obj = await asyncio.to_thread(ops.set_pause_annotation, package, name == keys.SIGNAL_PAUSE)
    if obj is None:
        print(f"note: no Package {package}; only the signal was sent", file=sys.stderr)
    elif name == keys.SIGNAL_RESUME and (obj.get("spec") or {}).get("paused"):
        print(f"warning: Package {package} has spec.paused: true, so the bridge pauses it again; "
              "set spec.paused to false to resume for good", file=sys.stderr)


def _signal_command(name: str) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        async def body(ops: Ops) -> int:
            await ops.signal(args.package, name)
            await _pause_switch(ops, args.package, name)
            print(f"{name} sent to {keys.rollout_workflow_id(args.package)}: "
                  + SIGNAL_DONE[name].format(p=args.package))
            return 0

        return _run(args, body)

    return command


def cmd_retry(args: argparse.Namespace) -> int:
    """`retry PACKAGE [--node N]...`."""

    async def body(ops: Ops) -> int:
        # The shape of workflows.messages.RetryRequest; empty means every failed node.
        await ops.signal(args.package, keys.SIGNAL_RETRY, {"nodes": list(args.node)})
        which = ", ".join(args.node) if args.node else "every failed node"
        print(f"retry sent to {keys.rollout_workflow_id(args.package)} for {which}")
        return 0

    return _run(args, body)


def cmd_nodes(args: argparse.Namespace) -> int:
    """`nodes [--selector S] [--package P]`."""

    async def body(ops: Ops) -> int:
        nodes = await asyncio.to_thread(ops.list_nodes, args.selector)
        if args.package:
            nodes = [n for n in nodes if args.package in n.packages]
            for node in nodes:
                node.packages = {args.package: node.packages[args.package]}
        if args.output == "json":
            print(json.dumps(progress_view.nodes_json(nodes), indent=2, sort_keys=True))
        else:
            _console().print(progress_view.nodes_table(nodes))
        return 0

    return _run(args, body)


def cmd_logs(args: argparse.Namespace) -> int:
    """`logs PACKAGE --node N [--mode M] [--all]`: the stage Job's log (latest pod unless --all)."""

    async def body(ops: Ops) -> int:
        if args.follow:
            from worker.log_follow import follow  # noqa: PLC0415 - only `--follow` needs it

            sandboxes = await asyncio.to_thread(ops.sandbox_dirs, args.node, list(args.sandbox_dir))
            options = (args.mode, args.wait_seconds, sandboxes)
            source = await asyncio.to_thread(follow, ops, args.package, args.node, options)
            print(f"== end of log; source: {source}", file=sys.stderr)
            return 0
        pods = await asyncio.to_thread(ops.stage_pods, args.package, args.node)
        if args.mode:
            pods = [p for p in pods if (p.metadata.labels or {}).get("noderoll.io/mode") == args.mode]
        if not pods:
            raise OpsError(f"no stage pod of {args.package} on {args.node}"
                           + (f" with mode {args.mode}" if args.mode else "")
                           + f" in namespace {keys.PACKAGE_POD_NAMESPACE}")
        sandboxes = await asyncio.to_thread(ops.sandbox_dirs, args.node, list(args.sandbox_dir))
        for pod in pods if args.all else pods[-1:]:
            log = await asyncio.to_thread(ops.stage_log, pod, sandboxes)
            code = "-" if log.exit_code is None else str(log.exit_code)
            # Headers on stderr: stdout is the log itself, ready for grep or a file.
            print(f"== {log.pod} (mode {log.mode}, {log.phase}, exit {code}); source: {log.source}",
                  file=sys.stderr)
            sys.stdout.write(log.text if log.text.endswith("\n") or not log.text else log.text + "\n")
            sys.stdout.flush()
        return 0

    return _run(args, body)


def register(subparsers: Any) -> None:
    """Add the ops commands to the `noderoll` parser."""
    from worker.ops_client import add_connection_flags

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=help_text)
        add_connection_flags(parser)
        return parser

    status = add("status", "rollout progress: phase, counts per state, batch, blocked and erroring nodes")
    status.add_argument("package", nargs="?", help="one Package (default: every Package, one row each)")
    status.add_argument("-o", "--output", choices=("table", "json"), default="table")
    status.set_defaults(func=cmd_status)
    for name, help_text in SIGNAL_HELP.items():
        parser = add(name, help_text)
        parser.add_argument("package", help="the Package whose rollout to signal")
        parser.set_defaults(func=_signal_command(name))
    retry = add("retry", "retry failed nodes of a rollout (every failed node, or the given ones)")
    retry.add_argument("package")
    retry.add_argument("--node", action="append", default=[], help="only this node (repeatable)")
    retry.set_defaults(func=cmd_retry)
    nodes = add("nodes", "per node: packages, versions, stage, state (the noderoll.io/state annotation)")
    nodes.add_argument("-l", "--selector", help="label selector of the nodes to show")
    nodes.add_argument("--package", help="only nodes that recorded this package")
    nodes.add_argument("-o", "--output", choices=("table", "json"), default="table")
    nodes.set_defaults(func=cmd_nodes)
    logs = add("logs", "the log of a package's stage Job on a node (latest stage unless --all)")
    logs.add_argument("package")
    logs.add_argument("--node", required=True)
    logs.add_argument("--mode", help="only stage pods of this mode (apply, apply-check, interrupt, ...)")
    logs.add_argument("--all", action="store_true", help="every stage pod of the package on the node, oldest first")
    logs.add_argument("--sandbox-dir", type=Path, action="append", default=[],
                      help="fleetsim sandbox dir holding full logs of simulated nodes (env NODEROLL_SANDBOX_DIR)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="stream the newest stage pod's log while it runs (waits for one to start)")
    logs.add_argument("--wait-seconds", type=float, default=600.0,
                      help="with --follow: how long to wait for a stage pod to appear")
    logs.set_defaults(func=cmd_logs)
