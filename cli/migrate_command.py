"""`noderoll migrate --finish-legacy`: finish the retired per-Package engine's open runs. Does I/O.

The one-engine release (ADR 0013) runs fleets only; its worker and bridge refuse to start while runs
of the per-Package engine are open (`service.legacy_engine`). This command finishes them, run
against the same namespace while the previous release's worker still runs (it executes their last
windows):

1. lists the open `RolloutWorkflow` (`package/<name>`) and `BudgetWorkflow` (`budget/...`) runs;
   none: nothing to do (exit 0);
2. signals `halt` to every `package/<name>` run: requests not yet started on their node are withdrawn;
3. waits until no node workflow is in a window (`NoderollPhase` `Running`, `Draining`,
   `Interrupting` or `WaitingForLease`), saying which ones it waits for, at most `--timeout` seconds
   (exit 1 when they do not finish; nothing is terminated then);
4. terminates the node workflows the old engine holds open between windows (phase `Erroring`:
   packages waiting for the old `retry`; `Waiting`: requests waiting for a dependency): this
   release's node workflow cannot continue them, and the fleets ask those nodes again;
5. terminates the `package/...` and `budget/...` runs;
6. uncordons every node noderoll cordoned whose record has no erroring package (a window stopped
   before it could uncordon), and names the nodes left cordoned on purpose (a package failed after
   the drain: the node stays cordoned until a window succeeds there or someone uncordons it).

Exit codes: 0 finished (or nothing to finish), 1 refused or timed out (the message says why), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import kube
from api.enums import State
from cli.ops_client import Ops, OpsError, add_connection_flags
from cli.ops_commands import run_ops
from kube.cordon import lift_own_cordon
from protocol import names
from service.legacy_engine import LegacyRun, open_legacy_runs

# Node workflow phases of a window in flight (the old engine also waited for budget leases in one).
WINDOW_PHASES = ("Running", "Draining", "Interrupting", "WaitingForLease")
# Phases in which the old engine's node workflow stays open between windows.
HOLDING_PHASES = ("Erroring", "Waiting")
REASON = "finished by `noderoll migrate --finish-legacy`: the per-Package engine is retired (ADR 0013)"


def node_query(phases: tuple[str, ...]) -> str:
    """Open node workflows in one of `phases` (pure)."""
    shown = " OR ".join(f"{names.SEARCH_ATTR_PHASE} = '{p}'" for p in phases)
    return f"WorkflowType = '{names.NODE_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' AND ({shown})"


async def _ids(ops: Ops, query: str) -> list[str]:
    return sorted({e.id async for e in ops.temporal.list_workflows(query)})


async def _halt(ops: Ops, runs: list[LegacyRun]) -> None:
    for run in runs:
        if run.workflow_type == names.LEGACY_WORKFLOW_TYPES[0]:
            await ops.temporal.get_workflow_handle(run.workflow_id).signal(names.SIGNAL_HALT)
            print(f"halted {run.workflow_id}")


async def _wait_for_windows(ops: Ops, timeout: float, poll: float) -> None:
    deadline = time.monotonic() + timeout
    shown: list[str] = []
    while True:
        busy = await _ids(ops, node_query(WINDOW_PHASES))
        if not busy:
            return
        if busy != shown:
            print(f"waiting for {len(busy)} node window(s) in flight: {', '.join(busy)}")
            shown = busy
        if time.monotonic() >= deadline:
            raise OpsError(f"{len(busy)} node window(s) still in flight after {timeout:.0f}s: {', '.join(busy)}; "
                           "is the previous release's worker running? Nothing was terminated; run again")
        await asyncio.sleep(poll)


async def _terminate(ops: Ops, workflow_ids: list[str]) -> None:
    for workflow_id in workflow_ids:
        await ops.temporal.get_workflow_handle(workflow_id).terminate(reason=REASON)
        print(f"terminated {workflow_id}")


def _uncordon(ops: Ops) -> list[str]:
    """Uncordon what noderoll cordoned unless a package erred there; the nodes left cordoned, with why."""
    # The window's own rule (`kube.cordon`: only noderoll's cordon is lifted), on this command's kubeconfig.
    kube.configure(ops.target.kubeconfig)
    kept = []
    for row in ops.list_nodes():
        if not (row.cordoned and row.cordoned_by_noderoll):
            continue
        erroring = sorted(p for p, entry in row.packages.items() if entry.state is State.ERRORING)
        if erroring or row.state_problem:
            why = f"erroring: {', '.join(erroring)}" if erroring else f"state unreadable: {row.state_problem}"
            kept.append(f"{row.name} ({why})")
            continue
        if lift_own_cordon(row.name):
            print(f"uncordoned {row.name} (cordoned by noderoll, no window runs there)")
    return kept


def cmd_finish_legacy(args: argparse.Namespace) -> int:
    """`migrate --finish-legacy` (module docstring)."""

    async def body(ops: Ops) -> int:
        runs = await open_legacy_runs(ops.temporal)
        if not runs:
            print(f"nothing to finish: no open run of the per-Package engine in namespace {ops.target.namespace!r}")
            return 0
        print(f"{len(runs)} open run(s) of the per-Package engine: {', '.join(r.workflow_id for r in runs)}")
        await _halt(ops, runs)
        await _wait_for_windows(ops, args.timeout, args.poll_seconds)
        await _terminate(ops, await _ids(ops, node_query(HOLDING_PHASES)))
        await _terminate(ops, [r.workflow_id for r in runs])
        kept = await asyncio.to_thread(_uncordon, ops)
        for line in kept:
            print(f"left cordoned on purpose: {line}; a successful window there uncordons it")
        print("done: `noderoll worker` and `noderoll bridge` of this release can start")
        return 0

    if not args.finish_legacy:
        print("noderoll migrate: say what to do: --finish-legacy")
        return 2
    return run_ops(args, body)


def register(subparsers: Any) -> None:
    """Add `migrate` to the `noderoll` parser."""
    parser = subparsers.add_parser(
        "migrate", help="upgrade help: --finish-legacy finishes the retired per-Package engine's open runs")
    add_connection_flags(parser)
    parser.add_argument("--finish-legacy", action="store_true",
                        help="halt package/* runs, wait for their node windows, terminate them and budget/* runs, "
                             "uncordon nodes noderoll left cordoned")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="give up waiting for node windows in flight after this many seconds (default 3600)")
    parser.add_argument("--poll-seconds", type=float, default=5.0, help="how often to look (default 5)")
    parser.set_defaults(func=cmd_finish_legacy, command="migrate")
