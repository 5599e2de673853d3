"""`noderoll status|pause|resume|halt|retry|nodes|logs`: drive fleet rollouts without the Temporal CLI. Does I/O.

Contract names (issues 7 and 13): `status [PACKAGE | --fleet POLICY]` (table, or `--json`),
`pause|resume|halt|retry (PACKAGE | --fleet POLICY) [--node N]...`, `nodes`, `logs PACKAGE --node N`;
`status --global POLICY` and `pause|resume|halt --global POLICY`: the promotion across clusters
(`global/<policy>`, `cli.global_status`). `--cluster NAME`: the fleets of that cluster.
A Package is rolled out by the fleet `fleet/<its deploymentPolicy>` (`fleet/default` without one):
the commands query that fleet's `progress` and send it the contract signals with a
`protocol.fleet.Filter` ({"packages": [PACKAGE], "nodes": [N, ...]}; `--fleet` alone: the whole
fleet), and read Packages, Nodes and stage pods like the bridge (see `cli.ops_client`,
`cli.ops_fleets`). Exit codes: 0 done, 1 refused or not configured (the message says which), 2 usage.
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
from api.enums import CanaryPhase, NodeStatus, RolloutPhase
from cli import global_status, progress_view
from cli.ops_client import Ops, OpsError, PackageView, drain_blocks, target_from_args
from cli.ops_fleets import SignalTarget, attach_fleet_nodes, fleet_views, package_view, signal_target
from protocol import names

EXIT_USAGE = 2
SIGNAL_HELP = {
    names.SIGNAL_PAUSE: "keep a Package out of new windows while its fleet rolls the others (also sets its "
                        "noderoll.io/pause annotation), or with --fleet pause the whole fleet; windows in "
                        "flight finish",
    names.SIGNAL_RESUME: "undo pause or halt for a Package (also removes its noderoll.io/pause annotation), "
                         "or with --fleet for the whole fleet: also clears a failure-threshold halt and "
                         "promotes a canary awaiting manual promotion",
    names.SIGNAL_HALT: "halt: requests not yet started on their node are withdrawn (of the whole fleet with "
                       "--fleet, else those carrying the Package, which is then kept out of new windows)",
    names.SIGNAL_RETRY: "erroring or blocked nodes get another window (every one, or the given --node ones; "
                        "for the Package, or every Package of the fleet with --fleet)",
}
SIGNAL_DONE = {
    names.SIGNAL_PAUSE: "kept out of new windows; windows in flight finish; `noderoll resume {t}` continues",
    names.SIGNAL_RESUME: "back in new windows",
    names.SIGNAL_HALT: "requests not yet started are withdrawn; `noderoll resume {t}` continues",
    names.SIGNAL_RETRY: "erroring and blocked nodes are asked again",
}
# What a resume of the whole fleet does besides.
WHOLE_FLEET_RESUME = "; a halt is lifted and a canary awaiting manual promotion is promoted"


def _console() -> Console:
    # A wide virtual terminal when piped, so tables are not folded into unreadable columns.
    return Console(width=None if sys.stdout.isatty() else 200)


def run_ops(args: argparse.Namespace, body: Callable[[Ops], Awaitable[int]]) -> int:
    """Connect, run `body`, close; OpsError becomes a one-line message and exit code (every ops and node command)."""

    async def main() -> int:
        ops = await Ops.connect(target_from_args(args))
        try:
            return int(await body(ops))
        finally:
            ops.close()

    try:
        return asyncio.run(main())
    except OpsError as err:
        print(f"noderoll {args.command}: {err}", file=sys.stderr)
        return 1


def _json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


async def _add_drain_blocks(ops: Ops, views: list[PackageView]) -> None:
    """Drains that wait, read from the Nodes like the bridge does (the fleet learns of a node only
    when its window ends)."""
    # A drain blocks only a window that runs: the nodes labelled in a window, not every node (issue 45).
    nodes = await asyncio.to_thread(ops.list_nodes, f"{keys.NODE_STATUS_LABEL}={NodeStatus.IN_PROGRESS.value}")
    for view in views:
        view.drain_blocked = drain_blocks(view.name, nodes)


def cmd_status(args: argparse.Namespace) -> int:
    """`status [PACKAGE | --fleet POLICY | --global POLICY]`."""
    if sum(map(bool, (args.package, args.fleet, args.global_policy))) > 1:
        print("noderoll status: give one of PACKAGE, --fleet, --global", file=sys.stderr)
        return EXIT_USAGE

    async def body(ops: Ops) -> int:
        if args.global_policy:
            view = await global_status.global_progress(ops, args.global_policy)
            if args.output == "json":
                global_status.print_json(view)
            else:
                _console().print(global_status.global_table(view))
            return 0
        if args.package:
            view = await package_view(ops, args.package)
            view.limits = await asyncio.to_thread(ops.package_limits, args.package)
            await _add_drain_blocks(ops, [view])
            if args.output == "json":
                _json(progress_view.progress_json(view))
            else:
                _console().print(progress_view.package_detail(view))
            return 0
        fleets = await fleet_views(ops, args.fleet)
        await _add_drain_blocks(ops, [v for f in fleets for v in f.packages])
        if args.output == "json":
            _json({"fleets": [progress_view.fleet_json(f) for f in fleets]})
        elif fleets:
            _console().print(progress_view.fleets_status(fleets))
        else:
            print("no Packages in the cluster and no fleet running "
                  "(kubectl apply -f deploy/examples/package-sysctl-tuning.yaml)")
        return 0

    return run_ops(args, body)


async def _pause_switch(ops: Ops, package: str, name: str) -> None:
    """Pause and resume of a Package also set its pause annotation, so the bridge agrees with the signal.

    The bridge hands the fleet `spec.paused` or the annotation with every desired state; a bare signal
    lasts in the fleet, the annotation is visible in `kubectl get` and survives a fleet's restart.
    """
    if name not in (names.SIGNAL_PAUSE, names.SIGNAL_RESUME):
        return
    obj = await asyncio.to_thread(ops.set_pause_annotation, package, name == names.SIGNAL_PAUSE)
    if obj is None:
        print(f"note: no Package {package}; only the signal was sent", file=sys.stderr)
    elif name == names.SIGNAL_RESUME and (obj.get("spec") or {}).get("paused"):
        print(f"warning: Package {package} has spec.paused: true, so it stays out of new windows; "
              "set spec.paused to false to resume for good", file=sys.stderr)


def _whole_fleet_hints(target: SignalTarget, name: str) -> list[str]:
    """What a Package-scoped resume does not do (a filter never clears the fleet's halt or promotes)."""
    progress = target.progress
    if name != names.SIGNAL_RESUME or not target.scope.packages or progress is None:
        return []
    fix = f"`noderoll resume --fleet {target.fleet}`"
    if progress.phase is RolloutPhase.HALTED:
        return [f"{names.fleet_workflow_id(target.fleet)} is Halted ({progress.message}); {fix} clears the halt"]
    if progress.canary_phase is CanaryPhase.AWAITING_PROMOTION:
        return [f"{names.fleet_workflow_id(target.fleet)}'s canary awaits manual promotion; {fix} promotes it"]
    return []


def _describe(target: SignalTarget) -> str:
    parts = []
    if target.scope.packages:
        parts.append("Package " + ", ".join(target.scope.packages))
    if target.scope.nodes:
        parts.append("node(s) " + ", ".join(target.scope.nodes))
    return " and ".join(parts) or "the whole fleet"


def _signal_command(name: str) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        if getattr(args, "global_policy", None):
            if args.package or args.fleet or args.node:
                print(f"noderoll {name}: --global POLICY takes no PACKAGE, --fleet or --node", file=sys.stderr)
                return EXIT_USAGE

            async def relay(ops: Ops) -> int:
                print(await global_status.signal_global(ops, args.global_policy, name))
                return 0

            return run_ops(args, relay)
        if bool(args.package) == bool(args.fleet):
            print(f"noderoll {name}: give a PACKAGE or --fleet POLICY (one of them)", file=sys.stderr)
            return EXIT_USAGE

        async def body(ops: Ops) -> int:
            target = await signal_target(ops, args.package, args.fleet, list(args.node))
            await ops.signal_fleet(target.fleet, name, target.scope)
            if args.package:
                await _pause_switch(ops, args.package, name)
            for note in (*target.notes, *_whole_fleet_hints(target, name)):
                print(f"note: {note}", file=sys.stderr)
            again = args.package or f"--fleet {target.fleet}"
            done = SIGNAL_DONE[name].format(t=again)
            if name == names.SIGNAL_RESUME and target.scope.is_empty():
                done += WHOLE_FLEET_RESUME
            print(f"{name} sent to {ops.fleet(target.fleet).id} for {_describe(target)}: {done}")
            return 0

        return run_ops(args, body)

    return command


def cmd_nodes(args: argparse.Namespace) -> int:
    """`nodes [--selector S] [--package P] [--fleet F]`."""

    async def body(ops: Ops) -> int:
        nodes = await asyncio.to_thread(ops.list_nodes, args.selector)
        fleets = await fleet_views(ops, args.fleet)
        await attach_fleet_nodes(ops, nodes, fleets)
        if args.fleet:
            nodes = [n for n in nodes if args.fleet in n.fleets]
        if args.package:
            nodes = [n for n in nodes if args.package in n.packages]
            for node in nodes:
                node.packages = {args.package: node.packages[args.package]}
        if args.output == "json":
            _json(progress_view.nodes_json(nodes))
        else:
            _console().print(progress_view.nodes_table(nodes))
        return 0

    return run_ops(args, body)


def cmd_logs(args: argparse.Namespace) -> int:
    """`logs PACKAGE --node N [--mode M] [--all]`: the stage pod's log (latest pod unless --all)."""

    async def body(ops: Ops) -> int:
        if args.follow:
            from cli.log_follow import follow  # noqa: PLC0415 - only `--follow` needs it

            sandboxes = await asyncio.to_thread(ops.sandbox_dirs, args.node, list(args.sandbox_dir))
            options = (args.mode, args.wait_seconds, sandboxes)
            source = await asyncio.to_thread(follow, ops, args.package, args.node, options)
            print(f"== end of log; source: {source}", file=sys.stderr)
            return 0
        pods = await asyncio.to_thread(ops.stage_pods, args.package, args.node, args.mode)
        if not pods:
            raise OpsError(f"no stage pod of {args.package} on {args.node}"
                           + (f" with mode {args.mode}" if args.mode else "")
                           + f" in namespace {keys.PACKAGE_POD_NAMESPACE} (a window deletes its stage pods once"
                           " their outcome is on the node; the latest failed attempt of an erroring package stays)")
        sandboxes = await asyncio.to_thread(ops.sandbox_dirs, args.node, list(args.sandbox_dir))
        for pod in pods if args.all else pods[-1:]:
            log = await asyncio.to_thread(ops.stage_log, pod, sandboxes, args.mode, args.package)
            code = "-" if log.exit_code is None else str(log.exit_code)
            # Headers on stderr: stdout is the log itself, ready for grep or a file.
            print(f"== {log.pod} (mode {log.mode}, {log.phase}, exit {code}); source: {log.source}",
                  file=sys.stderr)
            sys.stdout.write(log.text if log.text.endswith("\n") or not log.text else log.text + "\n")
            sys.stdout.flush()
        return 0

    return run_ops(args, body)


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="same as -o json")


def register(subparsers: Any) -> None:
    """Add the ops commands to the `noderoll` parser."""
    from cli.ops_client import add_connection_flags

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=help_text)
        add_connection_flags(parser)
        return parser

    status = add("status", "fleets and their Packages: phase, wave, batch, nodes per state; or one Package")
    status.add_argument("package", nargs="?", help="one Package (default: every fleet and its Packages)")
    status.add_argument("--fleet", metavar="POLICY", help="only this fleet (a DeploymentPolicy, or `default`)")
    status.add_argument("--global", dest="global_policy", metavar="POLICY",
                        help="the promotion of POLICY across clusters (global/<policy>): stage and every cluster")
    _add_output(status)
    status.set_defaults(func=cmd_status)
    for name, help_text in SIGNAL_HELP.items():
        parser = add(name, help_text)
        parser.add_argument("package", nargs="?", help="the Package (its fleet gets the signal, filtered to it)")
        parser.add_argument("--fleet", metavar="POLICY", help="the whole fleet of this DeploymentPolicy (or `default`)")
        parser.add_argument("--node", "--nodes", dest="node", action="append", default=[],
                            help="only this node (repeatable)")
        if name != names.SIGNAL_RETRY:
            parser.add_argument("--global", dest="global_policy", metavar="POLICY",
                                help=f"{name} the promotion of POLICY across clusters: every cluster's fleet")
        parser.set_defaults(func=_signal_command(name))
    nodes = add("nodes", "per node: its fleets' node state and disruptions, and per package version, stage, state")
    nodes.add_argument("-l", "--selector", help="label selector of the nodes to show")
    nodes.add_argument("--package", help="only nodes that recorded this package")
    nodes.add_argument("--fleet", metavar="POLICY", help="only nodes of this fleet")
    _add_output(nodes)
    nodes.set_defaults(func=cmd_nodes)
    logs = add("logs", "the log of a package's stage pod on a node (latest stage unless --all)")
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
