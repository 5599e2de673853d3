"""`noderoll worker`: the Temporal worker process running every workflow and activity. Does I/O.

Connection settings come from flags, then environment variables, then a running `noderoll dev up`
stack (`localstack.state.resolve_connection`). Activities are synchronous Kubernetes calls, run in
a thread pool; SIGTERM/SIGINT shut the worker down gracefully (running activities get
`graceful_shutdown_timeout` to finish, then Temporal retries them elsewhere).

Concurrency: every node window in flight holds one activity slot for the whole wait of each of its
Jobs or its reboot, so the slots bound how many windows run at once (a 1,000-node rollout with a
25% budget runs batches of 250). The slots are threads blocked in a watch, cheap in memory; the
Kubernetes client's connection pool is sized to them (`kube.configure`), so no thread opens and
drops connections of its own ("Connection pool is full, discarding connection").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

import kube
from activities import prometheus, stage_pod
from api.keys import DEFAULT_NAMESPACE, DEFAULT_TASK_QUEUE
from localstack.state import resolve_connection
from metrics import start_metrics_server
from worker.registry import ACTIVITIES, WORKFLOWS
from worker.temporal_client import SERVICE_CONNECT_WAIT_SECONDS, connect
from worker.version import worker_identity

log = logging.getLogger("noderoll.worker")
# Default activity slots (threads); `--max-concurrent-activities` / NODEROLL_MAX_CONCURRENT_ACTIVITIES.
ACTIVITY_THREADS = 256


@dataclass(frozen=True)
class WorkerSettings:
    """Everything `noderoll worker` needs to run."""

    temporal_address: str
    namespace: str
    task_queue: str
    kubeconfig: str | None
    metrics_port: int | None = None
    # Activity slots of `noderoll worker` (and the Kubernetes connection pool sized to them).
    max_concurrent_activities: int = ACTIVITY_THREADS


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `noderoll worker` to the CLI."""
    parser = subparsers.add_parser("worker", help="run the Temporal worker (all workflows and activities)")
    add_connection_arguments(parser)
    parser.add_argument("--max-concurrent-activities", type=int,
                        default=_env_int("NODEROLL_MAX_CONCURRENT_ACTIVITIES") or ACTIVITY_THREADS,
                        help="activity slots, i.e. node windows waiting at once (env "
                             f"NODEROLL_MAX_CONCURRENT_ACTIVITIES; default {ACTIVITY_THREADS})")
    parser.add_argument("--prometheus-address", default=os.environ.get(prometheus.ENV_ADDRESS) or None,
                        type=_http_url, metavar="URL",
                        help="Prometheus the analysis gates of DeploymentPolicies query, e.g. http://prometheus:9090 "
                             f"(a gate's spec.analysis[].address overrides it; env {prometheus.ENV_ADDRESS}; "
                             "default: none)")
    add_stage_pod_arguments(parser)
    parser.set_defaults(func=run)


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{value!r} is not an http:// or https:// URL")
    return value


def add_stage_pod_arguments(parser: argparse.ArgumentParser) -> None:
    """What every stage pod of this worker gets (activities.stage_pod; docs/operations.md)."""
    env = stage_pod.settings_from_env()
    group = parser.add_argument_group("stage pods")
    group.add_argument("--agent-image", default=env.agent_image,
                       help=f"noderoll agent image the stage pods run, unless a Package sets agentImage "
                            f"(env {stage_pod.ENV_AGENT_IMAGE}; default {stage_pod.DEFAULT_AGENT_IMAGE})")
    group.add_argument("--image-pull-secret", action="append", default=None, metavar="NAME",
                       help="Secret in noderoll-system for pulling package and agent images; repeatable "
                            f"(env {stage_pod.ENV_PULL_SECRETS}, comma-separated)")
    group.add_argument("--stage-host-network", action=argparse.BooleanOptionalAction, default=env.host_network,
                       help=f"run stage pods in the host's network namespace (env {stage_pod.ENV_HOST_NETWORK})")
    group.add_argument("--stage-priority-class", default=env.priority_class_name, metavar="NAME",
                       help=f"priorityClassName of the stage pods (env {stage_pod.ENV_PRIORITY_CLASS})")


def stage_pod_settings(args: argparse.Namespace) -> stage_pod.StagePodSettings:
    """The stage pod settings of `noderoll worker` from its flags (defaults from the environment)."""
    secrets = args.image_pull_secret if args.image_pull_secret is not None else list(
        stage_pod.settings_from_env().image_pull_secrets)
    return stage_pod.StagePodSettings(
        agent_image=args.agent_image, image_pull_secrets=tuple(secrets),
        host_network=args.stage_host_network, priority_class_name=args.stage_priority_class,
    )


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The connection flags shared by `noderoll worker` and `noderoll bridge` (read by `settings_from_args`)."""
    parser.add_argument("--temporal-address", default=None,
                        help="host:port of the Temporal frontend (env NODEROLL_TEMPORAL_ADDRESS; default: dev stack)")
    parser.add_argument("--temporal-namespace", default=os.environ.get("NODEROLL_TEMPORAL_NAMESPACE", DEFAULT_NAMESPACE),
                        help="Temporal namespace (env NODEROLL_TEMPORAL_NAMESPACE)")
    parser.add_argument("--task-queue", default=os.environ.get("NODEROLL_TASK_QUEUE", DEFAULT_TASK_QUEUE),
                        help="task queue (env NODEROLL_TASK_QUEUE)")
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig path (env KUBECONFIG; default: dev stack, else in-cluster config)")
    parser.add_argument("--metrics-port", type=int, default=_env_int("NODEROLL_METRICS_PORT"),
                        help="serve Prometheus /metrics on this port (env NODEROLL_METRICS_PORT; default: off)")
    parser.add_argument("--state-dir", default=None, help="dev stack state dir (env NODEROLL_STATE_DIR)")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def settings_from_args(args: argparse.Namespace, command: str = "worker") -> WorkerSettings:
    """Resolve flags, environment and the dev stack into settings; exit with a message when unresolved."""
    connection = resolve_connection(args.temporal_address, args.kubeconfig, args.state_dir)
    if connection.temporal_address is None:
        raise SystemExit(f"noderoll {command}: no Temporal address (use --temporal-address, "
                         "NODEROLL_TEMPORAL_ADDRESS, or start a stack with `noderoll dev up`)")
    return WorkerSettings(
        temporal_address=connection.temporal_address,
        namespace=args.temporal_namespace,
        task_queue=args.task_queue,
        kubeconfig=connection.kubeconfig,
        metrics_port=args.metrics_port,
        max_concurrent_activities=max(1, getattr(args, "max_concurrent_activities", ACTIVITY_THREADS)),
    )


async def start_service(settings: WorkerSettings) -> Client:
    """What every long-running process (worker, bridge) does first: Kubernetes client, Temporal
    (waiting for a frontend that is down or restarting), metrics endpoint."""
    kube.configure(settings.kubeconfig, pool_size=settings.max_concurrent_activities + kube.POOL_SPARE)
    client = await connect(
        settings.temporal_address, settings.namespace, wait_seconds=SERVICE_CONNECT_WAIT_SECONDS
    )
    if settings.metrics_port is not None:
        port = start_metrics_server(settings.metrics_port)
        log.info("metrics on :%d/metrics", port)
    return client


async def serve(settings: WorkerSettings, stop: asyncio.Event) -> None:
    """Run the worker until `stop` is set."""
    client = await start_service(settings)
    slots = settings.max_concurrent_activities
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="activity") as pool:
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            workflows=WORKFLOWS,
            activities=ACTIVITIES,
            activity_executor=pool,
            max_concurrent_activities=slots,
            graceful_shutdown_timeout=timedelta(seconds=10),
            # `noderoll version` reads the version of every running worker from its identity.
            identity=worker_identity(),
        )
        log.info("worker on %s namespace=%s task_queue=%s kubeconfig=%s activity slots=%d",
                 settings.temporal_address, settings.namespace, settings.task_queue,
                 settings.kubeconfig or "in-cluster", slots)
        async with worker:
            await stop.wait()


def run(args: argparse.Namespace) -> int:
    """Entry point of `noderoll worker`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from_args(args)
    pods = stage_pod_settings(args)
    stage_pod.configure(pods)
    prometheus.configure(args.prometheus_address)
    log.info("analysis gates query %s unless a gate names its own address",
             prometheus.configured_address() or "no Prometheus (set --prometheus-address)")
    log.info("stage pods: agent image %s, pull secrets %s, host network %s, priority class %s",
             pods.agent_image, ",".join(pods.image_pull_secrets) or "none", pods.host_network,
             pods.priority_class_name or "none")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop)

    asyncio.run(main())
    return 0
