"""`noderoll node reset|ignore|unignore`, `noderoll rerun`, `noderoll version`: operator verbs. Does I/O.

Each verb is also reachable without this CLI (docs/operations.md, "Operator verbs"):
* `node reset NODE [--package P]...`: signal-with-start `reset` (`protocol.fleet.NodeReset`) on
  `node/<NODE>`; the node workflow, the single writer of `noderoll.io/state`, forgets the record
  between windows (`workflows.node_reset`). Without the CLI: `temporal workflow signal-with-start`,
  or the Node annotation `noderoll.io/reset: "<id>[:<package>,...]"` (the bridge hands it over);
* `rerun PACKAGE [--node N]... [--stage S]`: the fleet signal `rerun` (`protocol.fleet.Rerun`) on
  `fleet/<the Package's policy>`; without the CLI: `temporal workflow signal`, or the Package
  annotation `noderoll.io/rerun: "<id>[:<stage>]"`;
* `node ignore|unignore NODE`: the Node label `noderoll.io/ignore=true` (`kubectl label`);
* `version`: this client's version, every worker polling the task queue (its Temporal identity,
  `protocol.version`) and the bridge holding the Lease (annotation `noderoll.io/version`).
Exit codes: 0 done, 1 refused (the message says why), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.service import RPCError

import kube
from api import keys
from cli.ops_client import Ops, OpsError, add_connection_flags
from cli.ops_commands import run_ops
from planning.node.node_plan import RERUN_STAGES
from protocol import names
from protocol.fleet import NodeReset, Rerun
from protocol.node import Route, signal_node_workflow
from protocol.version import identity_version, noderoll_version

EXIT_USAGE = 2


def _task_queue(args: argparse.Namespace) -> str:
    return str(args.task_queue or os.environ.get("NODEROLL_TASK_QUEUE")
               or names.cluster_task_queue(getattr(args, "cluster", "") or ""))


def cmd_reset(args: argparse.Namespace) -> int:
    """`node reset NODE [--package P]...`."""

    async def body(ops: Ops) -> int:
        await asyncio.to_thread(_read_node, ops, args.node)
        task_queue = _task_queue(args)
        # A signal-with-start on a queue no worker polls would start `node/<node>` where nothing runs it,
        # and every later window request for the node would wait in that run: refuse instead.
        if not await _worker_versions(ops, task_queue):
            raise OpsError(f"no worker polls task queue {task_queue}: give the worker's --task-queue "
                           "(or NODEROLL_TASK_QUEUE)")
        request = NodeReset(id=args.id or uuid.uuid4().hex[:12], packages=sorted(set(args.package)),
                            source="noderoll node reset")
        try:
            await signal_node_workflow(ops.temporal, args.node, names.SIGNAL_NODE_RESET, request,
                                       Route(task_queue, ops.target.cluster))
        except RPCError as err:
            raise OpsError(f"cannot signal reset to {names.node_workflow_id(args.node, ops.target.cluster)}: "
                           f"{err.message}") from err
        what = ", ".join(request.packages) if request.packages else "every package"
        print(f"reset {request.id} sent to {names.node_workflow_id(args.node, ops.target.cluster)}: it forgets {what} between windows; "
              "the fleets ask the node again at their next listing")
        return 0

    return run_ops(args, body)


def _read_node(ops: Ops, node: str) -> k8s.V1Node:
    try:
        return ops.core.read_node(node)
    except ApiException as err:
        if kube.is_not_found(err):
            raise OpsError(f"no node {node} (`kubectl get nodes` lists them)") from err
        raise


def _label_command(ignore: bool) -> Any:
    def command(args: argparse.Namespace) -> int:
        async def body(ops: Ops) -> int:
            await asyncio.to_thread(_read_node, ops, args.node)
            patch = {"metadata": {"labels": {keys.NODE_IGNORE_LABEL: "true" if ignore else None}}}
            await asyncio.to_thread(ops.core.patch_node, args.node, patch)
            if ignore:
                print(f"node {args.node} labelled {keys.NODE_IGNORE_LABEL}=true: no fleet gives it a new window "
                      "(a window already running finishes); `noderoll node unignore` undoes it")
            else:
                print(f"node {args.node}: label {keys.NODE_IGNORE_LABEL} removed; its fleets target it again")
            return 0

        return run_ops(args, body)

    return command


def cmd_rerun(args: argparse.Namespace) -> int:
    """`rerun PACKAGE [--node N]... [--stage S]`."""
    stages = [s.value for s in RERUN_STAGES]
    if args.stage and args.stage not in stages:
        print(f"noderoll rerun: --stage must be one of {', '.join(stages)}", file=sys.stderr)
        return EXIT_USAGE

    async def body(ops: Ops) -> int:
        obj = await asyncio.to_thread(ops.read_package, args.package)
        if obj is None:
            raise OpsError(f"no Package {args.package} (`kubectl get packages` lists them)")
        fleet = names.fleet_workflow_id((obj.get("spec") or {}).get("deploymentPolicy"), ops.target.cluster)
        request = Rerun(id=args.id or uuid.uuid4().hex[:12], package=args.package, nodes=sorted(set(args.node)),
                        stage=args.stage or "")
        try:
            await ops.temporal.get_workflow_handle(fleet).signal(names.SIGNAL_RERUN, request)
        except RPCError as err:
            raise OpsError(f"cannot signal rerun to {fleet}: {err.message} "
                           "(is the Package applied and `noderoll bridge` running?)") from err
        where = ", ".join(request.nodes) if request.nodes else "every node where it is complete"
        print(f"rerun {request.id} sent to {fleet}: {args.package} runs again from "
              f"{request.stage or 'the start'} on {where}")
        return 0

    return run_ops(args, body)


async def _worker_versions(ops: Ops, task_queue: str) -> list[dict[str, str]]:
    request = DescribeTaskQueueRequest(namespace=ops.target.namespace, task_queue=TaskQueue(name=task_queue),
                                       task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
    try:
        answer = await ops.temporal.workflow_service.describe_task_queue(request)
    except RPCError as err:
        raise OpsError(f"cannot describe task queue {task_queue}: {err.message}") from err
    return [{"identity": p.identity, "version": identity_version(p.identity) or "unknown (not a noderoll worker "
             "identity: an older release)"} for p in sorted(answer.pollers, key=lambda p: p.identity)]


def _bridge_version(ops: Ops, namespace: str, name: str) -> dict[str, str]:
    try:
        lease = k8s.CoordinationV1Api(ops.api).read_namespaced_lease(name, namespace)
    except ApiException as err:
        why = "no Lease (no bridge with leader election ran)" if err.status == 404 else f"HTTP {err.status}"
        return {"lease": f"{namespace}/{name}", "version": f"unknown: {why}"}
    holder = (lease.spec.holder_identity if lease.spec else None) or ""
    version = (lease.metadata.annotations or {}).get(keys.VERSION_ANNOTATION, "unknown (an older release)")
    return {"lease": f"{namespace}/{name}", "holder": holder or "none (released)", "version": version}


def cmd_version(args: argparse.Namespace) -> int:
    """`version`: client, workers, bridge."""
    mine = noderoll_version()

    async def body(ops: Ops) -> int:
        task_queue = _task_queue(args)
        workers = await _worker_versions(ops, task_queue)
        bridge = await asyncio.to_thread(_bridge_version, ops, args.lease_namespace, args.lease_name)
        if args.output == "json":
            print(json.dumps({"client": mine, "task_queue": task_queue, "workers": workers, "bridge": bridge},
                             indent=2, sort_keys=True))
            return 0
        print(f"client  {mine}")
        if not workers:
            print(f"worker  none polling task queue {task_queue}")
        for worker in workers:
            print(f"worker  {worker['version']}  ({worker['identity']}, task queue {task_queue})")
        holder = f", held by {bridge['holder']}" if "holder" in bridge else ""
        print(f"bridge  {bridge['version']}  (Lease {bridge['lease']}{holder})")
        return 0

    if args.client:
        print(mine)
        return 0
    return run_ops(args, body)


def register(subparsers: Any) -> None:
    """Add `node`, `rerun` and `version` to the `noderoll` parser."""

    def connected(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        add_connection_flags(parser)
        parser.add_argument("--task-queue", default=None, help="task queue of the worker (env NODEROLL_TASK_QUEUE)")
        return parser

    node = subparsers.add_parser("node", help="one node: reset its recorded state, ignore or unignore it")
    verbs = node.add_subparsers(dest="verb", metavar="VERB", required=True)
    reset = connected(verbs.add_parser(
        "reset", help="forget the node's recorded state (every package, or --package ones): its next window "
                      "installs from scratch; also the way out of an unreadable noderoll.io/state"))
    reset.add_argument("node")
    reset.add_argument("--package", action="append", default=[], help="only this package (repeatable)")
    reset.add_argument("--id", help="reset id (default: a new one); a repeated id is applied once")
    reset.set_defaults(func=cmd_reset, command="node reset")
    for verb, ignore in (("ignore", True), ("unignore", False)):
        parser = connected(verbs.add_parser(
            verb, help=f"{'set' if ignore else 'remove'} the label {keys.NODE_IGNORE_LABEL}=true "
                       f"({'no new windows' if ignore else 'targeted again'})"))
        parser.add_argument("node")
        parser.set_defaults(func=_label_command(ignore), command=f"node {verb}")
    rerun = connected(subparsers.add_parser(
        "rerun", help="run a complete Package again on every node where it is complete (or the --node ones)"))
    rerun.add_argument("package")
    rerun.add_argument("--node", action="append", default=[], help="only this node (repeatable)")
    rerun.add_argument("--stage", help=f"start at this stage ({', '.join(s.value for s in RERUN_STAGES)}; "
                                       "default: the whole install sequence)")
    rerun.add_argument("--id", help="rerun id (default: a new one); a repeated id is applied once")
    rerun.set_defaults(func=cmd_rerun)
    version = connected(subparsers.add_parser(
        "version", help="versions of this client, the workers polling the task queue and the bridge"))
    version.add_argument("--client", action="store_true", help="only this client's version (no connection)")
    version.add_argument("--lease-namespace", default=os.environ.get("NODEROLL_LEASE_NAMESPACE",
                                                                     keys.PACKAGE_POD_NAMESPACE))
    version.add_argument("--lease-name", default="noderoll-bridge", help="the bridge's Lease")
    version.add_argument("-o", "--output", choices=("text", "json"), default="text")
    version.set_defaults(func=cmd_version)
