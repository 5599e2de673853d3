"""`noderoll sim`: run a simulated fleet against a kube-apiserver until interrupted. Does I/O.

Contract: `noderoll sim --nodes N --kubeconfig PATH [--labels k=v,...] [--faults FILE]`; the other
flags (GPUs per node `--gpus 4,8`, `--racks`, `--domains`, timings, faults) are documented in docs/fleetsim.md. Without --kubeconfig, `$KUBECONFIG` or the running dev
stack (`noderoll dev up`) is used.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from typing import Any

from fleetsim.context import RACK_LABEL, FleetOptions
from fleetsim.faults import Faults, load_faults_file, parse_flag
from fleetsim.fleet import Fleet
from fleetsim.workloads import WorkloadSpec, create_workloads
from localstack.state import resolve_connection

log = logging.getLogger(__name__)
FAULTS_RELOAD_SECONDS = 2.0


def parse_labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` into a dict. Pure."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"label {item!r} is not key=value")
        labels[key] = value
    return labels


def parse_taints(text: str) -> list[dict[str, str]]:
    """kubelet's `--register-with-taints` form, `key=value:Effect,key2:Effect`, into API taints. Pure."""
    taints = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        head, sep, effect = item.rpartition(":")
        key, _, value = head.partition("=")
        if not sep or not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise argparse.ArgumentTypeError(f"taint {item!r} is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
        taints.append({"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect})
    return taints


def parse_gpus(text: str) -> list[int]:
    """`8` or `4,8` (cycled over the nodes) into GPU counts. Pure."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 0 for c in counts):
        raise argparse.ArgumentTypeError(f"--gpus {text!r}: give GPU counts per node, e.g. 8 or 4,8 (cycled)")
    return counts


def register(subparsers: Any) -> None:
    """Add `noderoll sim`."""
    p = subparsers.add_parser("sim", help="simulate N GPU nodes (kubelets, reboots, package pods) against an API server")
    p.add_argument("--nodes", type=int, required=True, help="number of simulated nodes")
    p.add_argument("--kubeconfig", help="kubeconfig (default $KUBECONFIG, else the dev stack)")
    p.add_argument("--state-dir", help="dev stack state dir to take the kubeconfig from")
    p.add_argument("--labels", type=parse_labels, default={}, help="extra node labels k=v,k2=v2")
    p.add_argument("--register-with-taints", type=parse_taints, default=[], metavar="KEY=VALUE:EFFECT,...",
                   help="taints every node has when it is created (as kubelet's flag)")
    p.add_argument("--gpus", type=parse_gpus, default=[8], metavar="N[,N...]",
                   help="allocatable nvidia.com/gpu per node, cycled over the nodes (4,8: alternating; default 8)")
    p.add_argument("--racks", type=int, default=0,
                   help="spread the nodes over N racks in contiguous blocks (label fleetsim.noderoll.io/rack=r0...)")
    p.add_argument("--rack-label", default=RACK_LABEL, help=f"label key of the rack (default {RACK_LABEL})")
    p.add_argument("--domains", type=int, default=0,
                   help="and over N NVLink domains (label fleetsim.noderoll.io/nvlink-domain=d0...)")
    p.add_argument("--faults", type=Path, help="faults file (YAML/JSON), reloaded when it changes")
    p.add_argument("--name-prefix", default="sim", help="node names are <prefix>-000... (default sim)")
    p.add_argument("--sandbox-dir", type=Path, help="per-node host roots (default /tmp/noderoll-fleetsim/<prefix>)")
    p.add_argument("--image-store", type=Path, action="append", default=[], help="image store folder (repeatable)")
    p.add_argument("--reboot-seconds", type=float, default=3.0, help="how long a reboot keeps a node NotReady")
    p.add_argument("--jitter-percent", type=float, default=0.0,
                   help="each node's reboots and stages take a factor of their time drawn once per node in "
                        "[1-P/100, 1+P/100] (default 0: none; stages see it as FLEETSIM_TIME_FACTOR)")
    p.add_argument("--pod-startup-seconds", type=float, default=1.0,
                   help="delay before a stage pod's containers start (the kubelet's sandbox and image pulls; default 1)")
    p.add_argument("--heartbeat-seconds", type=float, default=60.0, help="Lease renewal period per node")
    p.add_argument("--max-grace-seconds", type=float, default=30.0, help="cap on honoured termination grace periods")
    p.add_argument("--workers", type=int, default=8, help="worker threads (agent runs, status writes)")
    p.add_argument("--fail-stage", action="append", default=[], metavar="REGEX:MODE[:CODE]")
    p.add_argument("--hang-stage", action="append", default=[], metavar="REGEX:MODE")
    p.add_argument("--reboot-never-returns", action="append", default=[], metavar="REGEX")
    p.add_argument("--slow-termination", action="append", default=[], metavar="REGEX:SECONDS")
    p.add_argument("--unhealthy-gpus", action="append", default=[], metavar="REGEX[:CODE]",
                   help="these nodes' simulated GPUs fail a window's GPU verify (exit CODE, default 1)")
    p.add_argument("--workloads", action="store_true", help="also create training pods and Deployments with PDBs")
    p.add_argument("--workload-namespace", default="fleetsim-workloads")
    p.add_argument("--delete-on-exit", action="store_true", help="delete the simulated nodes when stopping")
    p.set_defaults(func=run)


def _faults(args: argparse.Namespace) -> Faults:
    rules = load_faults_file(args.faults) if args.faults else []
    for kind, values in (("fail-stage", args.fail_stage), ("hang", args.hang_stage),
                         ("reboot-never-returns", args.reboot_never_returns), ("slow-termination", args.slow_termination),
                         ("unhealthy-gpus", args.unhealthy_gpus)):
        rules += [parse_flag(kind, value) for value in values]
    return Faults(rules)


def _watch_faults_file(fleet: Fleet, path: Path, flag_rules: int) -> None:
    """Reload the faults file when it changes (rules from flags are kept)."""
    state = {"mtime": path.stat().st_mtime if path.exists() else 0.0}

    def check() -> None:
        if fleet.ctx.stopping.is_set():
            return
        mtime = path.stat().st_mtime if path.exists() else 0.0
        if mtime != state["mtime"]:
            state["mtime"] = mtime
            try:
                fleet.options.faults.replace(load_faults_file(path))
                log.info("reloaded faults from %s (%d flag rule(s) dropped)", path, flag_rules)
            except (OSError, ValueError) as err:
                log.warning("faults file %s not reloaded: %s", path, err)
        fleet.ctx.scheduler.call_later(FAULTS_RELOAD_SECONDS, check)

    fleet.ctx.scheduler.call_later(FAULTS_RELOAD_SECONDS, check)


def run(args: argparse.Namespace) -> int:
    """Start the fleet, optionally workloads, and run until SIGINT/SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    connection = resolve_connection(kubeconfig=args.kubeconfig, state_dir=args.state_dir)
    if connection.kubeconfig is None:
        log.error("no kubeconfig: pass --kubeconfig, set KUBECONFIG or run `noderoll dev up`")
        return 2
    options = FleetOptions(
        nodes=args.nodes,
        kubeconfig=connection.kubeconfig,
        name_prefix=args.name_prefix,
        labels=args.labels,
        register_taints=args.register_with_taints,
        gpus=args.gpus,
        racks=max(0, args.racks),
        domains=max(0, args.domains),
        rack_label=args.rack_label,
        sandbox_dir=args.sandbox_dir or Path("/tmp/noderoll-fleetsim") / args.name_prefix,
        image_stores=args.image_store,
        faults=_faults(args),
        reboot_seconds=args.reboot_seconds,
        jitter_percent=max(0.0, args.jitter_percent),
        pod_startup_seconds=max(0.0, args.pod_startup_seconds),
        heartbeat_seconds=args.heartbeat_seconds,
        max_grace_seconds=args.max_grace_seconds,
        workers=args.workers,
        delete_nodes_on_stop=args.delete_on_exit,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fleet = Fleet(options).start()
    print(f"fleetsim: {args.nodes} nodes {args.name_prefix}-* Ready (sandboxes in {options.sandbox_dir}); Ctrl-C stops", flush=True)
    try:
        if args.faults:
            _watch_faults_file(fleet, args.faults, len(args.fail_stage) + len(args.hang_stage))
        if args.workloads:
            spec = WorkloadSpec(namespace=args.workload_namespace, prefix=args.name_prefix, nodes=fleet.node_names,
                                gpus=fleet.gpus())
            print(f"fleetsim: workloads {create_workloads(fleet.ctx.kube, spec)}", flush=True)
        stop.wait()
    finally:
        fleet.stop()
    return 0
