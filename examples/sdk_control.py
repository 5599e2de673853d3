"""Steer a fleet rollout from Python with the Temporal SDK: pause one Package, read progress, resume it.

    .venv/bin/python examples/sdk_control.py --policy gpu-fleet --package kmod-blocklist

It talks to the fleet workflow `fleet/<policy>` exactly as the `noderoll` CLI and the bridge do: the
contract signals `pause` and `resume` with a `protocol.fleet.Filter` payload (`{"packages": [...]}`)
and the `progress` query, read into `planning.views.fleet_status.FleetProgress`. The connection defaults as
the CLI's do: `--temporal-address`, else NODEROLL_TEMPORAL_ADDRESS, else the running dev stack
(`scripts/noderoll dev up`, `scripts/noderoll demo --keep`); `--temporal-namespace`, else
NODEROLL_TEMPORAL_NAMESPACE, else `default`. Exit 0 when the pause showed in progress and the Package
was resumed, 1 when it did not show (say the Package has no node left to hold), 2 without an address.
Run by tests/integration/test_sdk_example.py against a live fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from api.enums import RolloutPhase, State
from cli.process_exit import exit_process
from localstack.state import resolve_connection
from planning.fleet.codec import progress_from_json
from planning.views.fleet_status import FleetProgress
from protocol import names
from protocol.fleet import Filter, ProgressFilter


async def progress(fleet: WorkflowHandle, nodes: ProgressFilter | None = None) -> FleetProgress:
    """The fleet's `progress` query, as the typed report the bridge and the CLI read: its summary, and with
    `nodes` the nodes it asks for (one page)."""
    return progress_from_json(await fleet.query(names.QUERY_PROGRESS, *(() if nodes is None else (nodes,))))


def show(report: FleetProgress, package: str) -> str:
    """One line for the fleet and one for the Package."""
    mine = report.packages[package]
    return (f"fleet/{report.policy}: {report.phase.value}, wave {report.wave}, batch {report.batch_number}, "
            f"nodes {report.counts}\n  {package} {mine.version}: {mine.phase.value}, nodes {mine.counts}")


async def main(args: argparse.Namespace) -> int:
    """Pause the Package, wait until progress shows it held, print, resume it."""
    address = resolve_connection(args.temporal_address, None, None).temporal_address
    if address is None:
        print("no Temporal address: --temporal-address, NODEROLL_TEMPORAL_ADDRESS or a dev stack", file=sys.stderr)
        return 2
    # noderoll's processes use the pydantic data converter; a client must use the same one.
    client = await Client.connect(address, namespace=args.temporal_namespace, data_converter=pydantic_data_converter)
    fleet = client.get_workflow_handle(names.fleet_workflow_id(args.policy))
    only = Filter(packages=[args.package])
    print("before:", show(await progress(fleet), args.package))
    await fleet.signal(names.SIGNAL_PAUSE, only)
    # Windows in flight finish; the Package shows Paused once none carrying it runs and nodes wait for it.
    held = False
    for _ in range(args.wait_seconds):
        report = await progress(fleet)
        held = report.packages[args.package].phase is RolloutPhase.PAUSED
        if held:
            break
        await asyncio.sleep(1)
    print("paused:", show(report, args.package))
    windows = await progress(fleet, ProgressFilter(states=[State.IN_PROGRESS.value]))
    print(f"  nodes in a window: {', '.join(windows.nodes) or 'none'}"
          + (f" (and more after {windows.nodes_next})" if windows.nodes_next else ""))
    await fleet.signal(names.SIGNAL_RESUME, only)
    print("resumed:", show(await progress(fleet), args.package))
    return 0 if held else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The example's flags; connection defaults as the `noderoll` CLI's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", required=True, help="the DeploymentPolicy: its fleet is fleet/<policy>")
    parser.add_argument("--package", required=True, help="the Package to pause and resume")
    parser.add_argument("--temporal-address", default=None, help="host:port (env NODEROLL_TEMPORAL_ADDRESS; default: dev stack)")
    parser.add_argument("--temporal-namespace", default=os.environ.get("NODEROLL_TEMPORAL_NAMESPACE", names.DEFAULT_NAMESPACE))
    parser.add_argument("--wait-seconds", type=int, default=120, help="how long to wait for the pause to show")
    return parser.parse_args(argv)


if __name__ == "__main__":
    # Not sys.exit: a short Temporal client process can abort in interpreter finalization (cli.process_exit).
    exit_process(asyncio.run(main(parse())))
