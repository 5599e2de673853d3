"""`noderoll report POLICY [-o FILE]`: one self-contained HTML page of a fleet's rollout. Does I/O.

Reads the fleet's runs (`fleet/<policy>`, back through continue-as-new) and the window runs of
every node it handed a window to (`node/<node>`, since the fleet's first run) from Temporal
(`cli.rollout_history`; with `--cluster NAME` the cluster's `fleet/<cluster>/<policy>` and
`node/<cluster>/<node>`), the nodes' records (`noderoll.io/state`), and the canary, phase and
message from the fleet's `progress` (or, when it no longer runs, from its Packages' and policy's
statuses); `planning.views.rollout_report.build_report` makes the timeline and
`planning.views.report_html.render_html` the page. Exit codes: 0 written, 1 no such fleet or no cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.service import RPCError

from api import keys
from cli.ops_client import NoAnswer, Ops, OpsError, add_connection_flags
from cli.ops_commands import run_ops
from cli.ops_fleets import package_fleet
from cli.rollout_history import fleet_histories, node_histories
from planning.views.report_html import render_html
from planning.views.rollout_report import ReportInput, RunHistory, build_report
from protocol.names import fleet_workflow_id

# Node histories read at once (each is one or a few Temporal calls).
CONCURRENT_READS = 8


def _records(ops: Ops, nodes: set[str]) -> dict[str, dict[str, Any]]:
    records = {}
    for node in ops.core.list_node().items:
        if node.metadata.name in nodes:
            text = (node.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION, "")
            try:
                records[node.metadata.name] = json.loads(text) if text else {}
            except ValueError:
                records[node.metadata.name] = {}
    return records


async def _fleet_facts(ops: Ops, policy: str) -> tuple[list[str], str, str]:
    """(canary nodes, phase, message): from the running fleet, else from its objects' statuses."""
    try:
        progress = await ops.query_fleet(policy)
        return list(progress.canary_nodes), progress.phase.value, progress.message
    except NoAnswer:
        pass
    packages = [p for p in await asyncio.to_thread(ops.list_packages) if package_fleet(p) == policy]
    canary = sorted({n for p in packages for n in ((p.get("status") or {}).get("canary") or {}).get("nodes") or []})
    status = (await asyncio.to_thread(ops.read_policy, policy) or {}).get("status") or {}
    return canary, status.get("phase", ""), status.get("message", "")


async def collect_report_input(ops: Ops, policy: str) -> ReportInput:
    """Everything the report of `fleet/<policy>` (the cluster's) is drawn from (module docstring)."""
    cluster = ops.target.cluster
    try:
        fleet = await fleet_histories(ops.temporal, policy, cluster)
    except RPCError as err:
        raise OpsError(f"no history of {fleet_workflow_id(policy, cluster)}: {err.message}") from err
    nodes = sorted({n for run in fleet for a in run.activities if a.type == "request_windows"
                    for n in (a.input or {}).get("nodes") or []})
    since = fleet[0].started
    limit = asyncio.Semaphore(CONCURRENT_READS)

    async def read(node: str) -> list[RunHistory]:
        async with limit:
            return await node_histories(ops.temporal, node, since, cluster)

    runs = dict(zip(nodes, await asyncio.gather(*(read(n) for n in nodes)), strict=True))
    records = await asyncio.to_thread(_records, ops, set(nodes))
    canary, phase, message = await _fleet_facts(ops, policy)
    return ReportInput(policy=policy, fleet=fleet, nodes=runs, records=records, canary=canary, phase=phase,
                       message=message, generated_at=datetime.now(UTC).isoformat(timespec="seconds"), cluster=cluster)


async def write_report(ops: Ops, policy: str, path: Path) -> Path:
    """Write the report of `fleet/<policy>` to `path`; returns it."""
    report = build_report(await collect_report_input(ops, policy))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report), encoding="utf-8")
    return path


def cmd_report(args: argparse.Namespace) -> int:
    """`noderoll report` (module docstring)."""

    async def body(ops: Ops) -> int:
        path = await write_report(ops, args.policy, Path(args.output or f"noderoll-report-{args.policy}.html"))
        print(f"wrote {path.resolve()}")
        return 0

    return run_ops(args, body)


def register(subparsers: Any) -> None:
    """Add `noderoll report`."""
    parser = subparsers.add_parser(
        "report", help="one self-contained HTML page of a fleet's rollout: a timeline per node (drain, stages, "
                       "interrupt; failures and retries; batches and the canary), disruptions, failures, summary")
    add_connection_flags(parser)
    parser.add_argument("policy", metavar="POLICY", help="the fleet's DeploymentPolicy (or `default`)")
    parser.add_argument("-o", "--output", help="the HTML file (default: noderoll-report-POLICY.html)")
    parser.set_defaults(func=cmd_report)
