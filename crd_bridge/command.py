"""`noderoll bridge`: the CRD bridge process. Does I/O.

Connection flags and environment are `noderoll worker`'s (`service.connection.add_connection_arguments`
and `settings_from_args`: flags, then environment, then a running `noderoll dev up` stack), plus
`--resync-seconds`, `--status-seconds`, `--label-selector` (a shard of the Packages) and leader election (`--leader-election`/`--no-leader-election`,
the Lease `--lease-namespace`/`--lease-name`, `--identity`; defaults: on, `noderoll-system/noderoll-bridge`,
the host name and pid). SIGTERM/SIGINT stop it cleanly (the Lease is released for a standby).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket

from crd_bridge.bridge import Bridge, BridgeOptions
from crd_bridge.fleet_client import Fleets
from crd_bridge.leader import LEASE_NAME, LeaseSettings
from service.connection import ServiceSettings, add_connection_arguments, start_service
from service.connection import settings_from_args as service_settings_from_args

log = logging.getLogger("noderoll.bridge")
LEASE_NAMESPACE_ENV = "NODEROLL_LEASE_NAMESPACE"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `noderoll bridge` to the CLI."""
    parser = subparsers.add_parser(
        "bridge", help="run the CRD bridge (Packages and DeploymentPolicies -> rollout workflows, status)"
    )
    add_connection_arguments(parser)
    parser.add_argument("--resync-seconds", type=float,
                        default=float(os.environ.get("NODEROLL_RESYNC_SECONDS", "30")),
                        help="reconcile every object this often besides events (env NODEROLL_RESYNC_SECONDS)")
    parser.add_argument("--settle-seconds", type=float,
                        default=float(os.environ.get("NODEROLL_SETTLE_SECONDS", "2")),
                        help="hand a fleet its desired state once its objects were quiet this long, so objects "
                             "applied together roll out as one change set (env NODEROLL_SETTLE_SECONDS)")
    parser.add_argument("--status-seconds", type=float, default=3.0,
                        help="how often running fleets' progress is written to their Packages' and policy's status")
    parser.add_argument("--fleet-relist-min-seconds", type=_positive_seconds,
                        default=os.environ.get("NODEROLL_FLEET_RELIST_MIN_SECONDS", "30"),
                        help="a fleet this bridge starts re-lists its nodes after node changes at most this often "
                             "(env NODEROLL_FLEET_RELIST_MIN_SECONDS; default 30; a running fleet keeps its own)")
    parser.add_argument("--fleet-watchdog-seconds", type=_positive_seconds,
                        default=os.environ.get("NODEROLL_FLEET_WATCHDOG_SECONDS", "60"),
                        help="while windows are out, a fleet this bridge starts checks this often that their node "
                             "workflows still run (env NODEROLL_FLEET_WATCHDOG_SECONDS; default 60; a running fleet "
                             "keeps its own)")
    parser.add_argument("--label-selector", default=os.environ.get("NODEROLL_BRIDGE_LABEL_SELECTOR", ""),
                        help="only Packages and DeploymentPolicies with these labels, e.g. shard=a "
                             "(env NODEROLL_BRIDGE_LABEL_SELECTOR; default: all)")
    parser.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=True,
                        help="hold a Lease so only one replica acts (default: on)")
    parser.add_argument("--lease-namespace", default=os.environ.get(LEASE_NAMESPACE_ENV, "noderoll-system"),
                        help=f"namespace of the leader Lease (env {LEASE_NAMESPACE_ENV})")
    parser.add_argument("--lease-name", default=LEASE_NAME, help="name of the leader Lease")
    parser.add_argument("--identity", default=f"{socket.gethostname()}-{os.getpid()}",
                        help="this replica's name in the Lease (default: host name and pid)")
    parser.set_defaults(func=run)


def _positive_seconds(text: str) -> int:
    """A whole number of seconds, at least 1 (argparse names the flag and the value when it is not)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1 second")
    return value


def settings_from_args(args: argparse.Namespace) -> ServiceSettings:
    """Connection settings exactly as `noderoll worker` resolves them."""
    return service_settings_from_args(args, command="bridge")


def options_from_args(args: argparse.Namespace) -> BridgeOptions:
    """Timings and leader election from the flags."""
    lease = None
    if args.leader_election:
        lease = LeaseSettings(identity=args.identity, namespace=args.lease_namespace, name=args.lease_name)
    return BridgeOptions(resync_seconds=args.resync_seconds, status_seconds=args.status_seconds,
                         settle_seconds=args.settle_seconds, lease=lease,
                         label_selector=args.label_selector, fleet_relist_min_seconds=args.fleet_relist_min_seconds,
                         fleet_watchdog_seconds=args.fleet_watchdog_seconds)


async def serve(settings: ServiceSettings, options: BridgeOptions, stop: asyncio.Event) -> None:
    """Connect, then run the bridge until `stop` is set."""
    started = await start_service(settings, "bridge")
    log.info("bridge on %s namespace=%s task_queue=%s cluster=%s kubeconfig=%s leader-election=%s",
             settings.temporal_address, settings.namespace, settings.task_queue, settings.cluster or "none",
             settings.kubeconfig or "in-cluster", "on" if options.lease else "off")
    fleets = Fleets(started.client, settings.task_queue, settings.cluster, options.fleet_relist_min_seconds,
                    options.fleet_watchdog_seconds)
    await Bridge(fleets, options).run(stop)


def run(args: argparse.Namespace) -> int:
    """Entry point of `noderoll bridge`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from_args(args)
    options = options_from_args(args)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, options, stop)

    asyncio.run(main())
    return 0
