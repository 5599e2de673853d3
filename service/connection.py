"""Connection flags, settings and start-up shared by `noderoll worker` and `noderoll bridge`. Does I/O.

Settings come from flags, then environment variables, then a running `noderoll dev up` stack
(`localstack.state.resolve_connection`): `--temporal-address` (`NODEROLL_TEMPORAL_ADDRESS`),
`--temporal-namespace`, `--task-queue`, `--kubeconfig` (`KUBECONFIG`; in-cluster config otherwise),
`--metrics-port`, `--state-dir`, `--cluster` (`NODEROLL_CLUSTER`: the cluster's name when several
share the namespace; the task queue then defaults to `noderoll-<cluster>`; ADR 0017). `start_service`
is what each of them does first: the Kubernetes client (its connection pool sized to the worker's
activity slots), Temporal (waiting for a frontend that is down or restarting), a refusal to start
while the retired per-Package engine has open runs (`service/legacy_engine.py`) or while a process
of another cluster drives the task queue (`service/cluster_guard.py`), the metrics endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from dataclasses import dataclass

from temporalio.client import Client

import kube
from localstack.state import resolve_connection
from metrics import start_metrics_server
from protocol.names import DEFAULT_NAMESPACE, cluster_name_problem, cluster_task_queue
from service.cluster_guard import Identity, kube_cluster_uid, refuse_other_clusters
from service.legacy_engine import refuse_legacy_runs
from service.temporal_client import SERVICE_CONNECT_WAIT_SECONDS, connect

log = logging.getLogger("noderoll.service")
# Default activity slots (threads) of `noderoll worker`; `--max-concurrent-activities` /
# NODEROLL_MAX_CONCURRENT_ACTIVITIES. The bridge has no such flag: its pool is sized to the default.
ACTIVITY_THREADS = 256
# Workflow task pollers of `noderoll worker` (`--workflow-task-pollers` / NODEROLL_WORKFLOW_TASK_POLLERS):
# unset, the SDK's polling (5 polls, 0.2 of them on the task queue: ONE). Every node window is a new
# workflow run whose first task waits on the task queue, so with one poll there a batch's windows
# begin one poll round trip after another: at 1,000 nodes a 250-node batch's last window began
# 109 s late. N polls put half of them there (1,000 nodes: 8 s, ratio 2.83 -> 2.54), but on 2 cores
# at 200 nodes 20 polls did worse than the SDK's (1.29 against 1.26), and with two workers the first
# tasks of a small rollout all went to the worker that polled first (docs/benchmarks.md). Hence
# opt-in, for large fleets.
NONSTICKY_POLL_SHARE = 0.5
# How long a workflow task waits on `noderoll worker`'s sticky queue before the server hands it out
# again from the task queue, to any worker, with the run's whole history to replay
# (`--sticky-schedule-to-start` / NODEROLL_STICKY_SCHEDULE_TO_START; ADR 0021). With the SDK's 10 s,
# 0.54-0.66 workflow tasks per window timed out so at 1,000 nodes on 2 cores, each one a task more
# for the server and a replay for the worker; with 30 s, none (docs/benchmarks.md). A worker shut
# down gracefully tells the server, which sends its runs' next tasks to the task queue at once; one
# that crashed costs at most this wait for the tasks sent to its queue in the 10 s before the server
# takes a sticky queue without polls for gone (tests/integration/test_sticky_queue.py).
STICKY_SCHEDULE_TO_START_SECONDS = 30.0


@dataclass(frozen=True)
class ServiceSettings:
    """Everything `noderoll worker` (and, but for the activity slots, `noderoll bridge`) needs to run."""

    temporal_address: str
    namespace: str
    task_queue: str
    kubeconfig: str | None
    metrics_port: int | None = None
    # Activity slots of `noderoll worker` (and the Kubernetes connection pool sized to them).
    max_concurrent_activities: int = ACTIVITY_THREADS
    # Workflow task pollers of `noderoll worker` (half of them on the task queue; None: the SDK's, see above).
    workflow_task_pollers: int | None = None
    # Seconds a workflow task waits on the worker's sticky queue before it goes to the task queue (above).
    sticky_schedule_to_start_seconds: float = STICKY_SCHEDULE_TO_START_SECONDS
    # The cluster's name ("" = none: the single-cluster ids `fleet/<policy>`, `node/<node>`).
    cluster: str = ""


@dataclass(frozen=True)
class Started:
    """What `start_service` returns: the Temporal client and who this process is."""

    client: Client
    identity: Identity


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The connection flags shared by `noderoll worker` and `noderoll bridge` (read by `settings_from_args`)."""
    parser.add_argument("--temporal-address", default=None,
                        help="host:port of the Temporal frontend (env NODEROLL_TEMPORAL_ADDRESS; default: dev stack)")
    parser.add_argument("--temporal-namespace", default=os.environ.get("NODEROLL_TEMPORAL_NAMESPACE", DEFAULT_NAMESPACE),
                        help="Temporal namespace (env NODEROLL_TEMPORAL_NAMESPACE)")
    parser.add_argument("--task-queue", default=os.environ.get("NODEROLL_TASK_QUEUE") or None,
                        help="task queue (env NODEROLL_TASK_QUEUE; default noderoll, or noderoll-<cluster>)")
    parser.add_argument("--cluster", default=os.environ.get(CLUSTER_ENV, ""), metavar="NAME",
                        help=f"this cluster's name when several clusters share the Temporal namespace: ids "
                             f"fleet/<cluster>/<policy> and node/<cluster>/<node> (env {CLUSTER_ENV}; default: "
                             "none, the single-cluster ids)")
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig path (env KUBECONFIG; default: dev stack, else in-cluster config)")
    parser.add_argument("--metrics-port", type=int, default=env_int("NODEROLL_METRICS_PORT"),
                        help="serve Prometheus /metrics on this port (env NODEROLL_METRICS_PORT; default: off)")
    parser.add_argument("--state-dir", default=None, help="dev stack state dir (env NODEROLL_STATE_DIR)")


CLUSTER_ENV = "NODEROLL_CLUSTER"


def cluster_from_args(args: argparse.Namespace, command: str) -> str:
    """`--cluster` (or NODEROLL_CLUSTER), checked; exits with the reason when it is not a valid name."""
    cluster = str(getattr(args, "cluster", "") or "")
    problem = cluster_name_problem(cluster) if cluster else ""
    if problem:
        raise SystemExit(f"noderoll {command}: --cluster: {problem}")
    return cluster


def env_int(name: str) -> int | None:
    """The integer in environment variable `name`, None when it is unset or empty."""
    value = os.environ.get(name)
    return int(value) if value else None


def settings_from_args(args: argparse.Namespace, command: str = "worker") -> ServiceSettings:
    """Resolve flags, environment and the dev stack into settings; exit with a message when unresolved."""
    connection = resolve_connection(args.temporal_address, args.kubeconfig, args.state_dir)
    if connection.temporal_address is None:
        raise SystemExit(f"noderoll {command}: no Temporal address (use --temporal-address, "
                         "NODEROLL_TEMPORAL_ADDRESS, or start a stack with `noderoll dev up`)")
    cluster = cluster_from_args(args, command)
    return ServiceSettings(
        temporal_address=connection.temporal_address,
        namespace=args.temporal_namespace,
        task_queue=args.task_queue or cluster_task_queue(cluster),
        cluster=cluster,
        kubeconfig=connection.kubeconfig,
        metrics_port=args.metrics_port,
        max_concurrent_activities=max(1, getattr(args, "max_concurrent_activities", ACTIVITY_THREADS)),
        workflow_task_pollers=getattr(args, "workflow_task_pollers", None),
        sticky_schedule_to_start_seconds=getattr(args, "sticky_schedule_to_start",
                                                 STICKY_SCHEDULE_TO_START_SECONDS),
    )


async def start_service(settings: ServiceSettings, process: str) -> Started:
    """What every long-running process (`process`: worker, bridge) does first: Kubernetes client,
    Temporal (waiting for a frontend that is down or restarting), the refusal to run beside the retired
    per-Package engine (`service.legacy_engine`) or beside a process of another cluster on the same task
    queue (`service.cluster_guard`), metrics endpoint."""
    kube.configure(settings.kubeconfig, pool_size=settings.max_concurrent_activities + kube.POOL_SPARE)
    client = await connect(
        settings.temporal_address, settings.namespace, wait_seconds=SERVICE_CONNECT_WAIT_SECONDS
    )
    await refuse_legacy_runs(client, process)
    identity = Identity(settings.cluster, await asyncio.to_thread(kube_cluster_uid))
    await refuse_other_clusters(client, process, settings.task_queue, identity)
    if settings.metrics_port is not None:
        port = start_metrics_server(settings.metrics_port)
        log.info("metrics on :%d/metrics", port)
    return Started(client, identity)
