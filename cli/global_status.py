"""`noderoll status --global POLICY` and `pause|resume|halt --global POLICY`: the promotion across clusters. Does I/O.

`global/<policy>` (ADR 0017) answers the `progress` query with a `protocol.clusters.GlobalView`: the
latest change set, the stage granted, the promotion's phase (soaking, halted, paused) and every
cluster's stage and state (its `clusters` section). The signals `pause`, `resume` and `halt` sent to
it act on every cluster's fleet (the global workflow relays them). Rendering is `global_table` (pure).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from temporalio.client import WorkflowQueryRejectedError
from temporalio.service import RPCError, RPCStatusCode

from cli.ops_client import Ops, OpsError
from planning.clusters.global_codec import global_view_from_json, global_view_to_json
from protocol import names
from protocol.clusters import GlobalView

STATE_STYLE = {"complete": "green", "running": "cyan", "failed": "red", "held": "yellow", "waiting": "white",
               "unknown": "dim"}


async def global_progress(ops: Ops, policy: str) -> GlobalView:
    """`global/<policy>`'s `progress`; OpsError when it never ran or does not answer."""
    handle = ops.temporal.get_workflow_handle(names.global_workflow_id(policy))
    try:
        return global_view_from_json(await handle.query(names.QUERY_PROGRESS))
    except WorkflowQueryRejectedError as err:
        raise OpsError(f"{handle.id} is not running") from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise OpsError(f"{handle.id} has never run: no cluster's fleet of DeploymentPolicy {policy} has "
                           "spec.clusters and a cluster name (--cluster)") from err
        raise OpsError(f"{handle.id} did not answer: {err.message}") from err


async def signal_global(ops: Ops, policy: str, signal: str) -> str:
    """Send `signal` to `global/<policy>` (relayed to every cluster's fleet); what was done."""
    handle = ops.temporal.get_workflow_handle(names.global_workflow_id(policy))
    try:
        await handle.signal(signal)
    except RPCError as err:
        raise OpsError(f"cannot signal {signal} to {handle.id}: {err.message}") from err
    return f"{signal} sent to {handle.id}: it relays {signal} to every cluster's fleet of DeploymentPolicy {policy}"


def global_json(view: GlobalView) -> dict[str, Any]:
    """`--json`: the view as the query answers it."""
    return global_view_to_json(view)


def global_table(view: GlobalView) -> Group:
    """The promotion: one line for the change and the stage, a table of clusters (pure)."""
    stage = f"stage {view.stage + 1} of {len(view.stages)}" if view.stage >= 0 else "no stage granted"
    head = Text(f"global/{view.policy}  {view.phase}  {stage}  change {view.change or '-'}"
                f"{'  (' + view.summary + ')' if view.summary else ''}\n{view.message}")
    table = Table("CLUSTER", "STAGE", "STATE", "MESSAGE", box=None, pad_edge=False)
    for cluster in view.clusters:
        table.add_row(cluster.cluster, str(cluster.stage + 1) if cluster.stage >= 0 else "-",
                      Text(cluster.state, style=STATE_STYLE.get(cluster.state, "")), cluster.message)
    return Group(head, table)


def print_json(view: GlobalView) -> None:
    """`noderoll status --global POLICY --json`."""
    print(json.dumps(global_json(view), indent=2, sort_keys=True))
