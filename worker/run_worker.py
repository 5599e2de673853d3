"""`noderoll worker`: the Temporal worker process running every workflow and activity. Does I/O.

Connection settings come from flags, then environment variables, then a running `noderoll dev up`
stack (`service.connection`, shared with `noderoll bridge`). With a cluster name (`--cluster`) the
worker also polls the task queue `noderoll-global` for the promotion across clusters
(`global/<policy>`, which calls no activity: any cluster's worker can run it; ADR 0017). Activities are synchronous Kubernetes calls, run in
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
from datetime import timedelta

from temporalio.worker import Worker

from activities import prometheus, stage_pod
from protocol.names import GLOBAL_TASK_QUEUE
from protocol.version import worker_identity
from service.connection import (
    ACTIVITY_THREADS,
    STICKY_SCHEDULE_TO_START_SECONDS,
    ServiceSettings,
    add_connection_arguments,
    env_int,
    settings_from_args,
    start_service,
)
from worker.registry import ACTIVITIES, GLOBAL_WORKFLOWS, WORKFLOWS
from worker.tuning import (
    ENV_STICKY_SCHEDULE_TO_START,
    ENV_WORKFLOW_TASK_POLLERS,
    LOCAL_ACTIVITY_SLOTS,
    activity_threads,
    polling,
    sticky_schedule_to_start,
    workflow_task_pollers,
)

log = logging.getLogger("noderoll.worker")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `noderoll worker` to the CLI."""
    parser = subparsers.add_parser("worker", help="run the Temporal worker (all workflows and activities)")
    add_connection_arguments(parser)
    parser.add_argument("--max-concurrent-activities", type=int,
                        default=env_int("NODEROLL_MAX_CONCURRENT_ACTIVITIES") or ACTIVITY_THREADS,
                        help="activity slots, i.e. node windows waiting at once (env "
                             f"NODEROLL_MAX_CONCURRENT_ACTIVITIES; default {ACTIVITY_THREADS})")
    parser.add_argument("--workflow-task-pollers", type=workflow_task_pollers, metavar="N",
                        default=os.environ.get(ENV_WORKFLOW_TASK_POLLERS) or None,
                        help="concurrent workflow task polls, half of them for new node windows: for "
                             "large fleets, e.g. 20 (env NODEROLL_WORKFLOW_TASK_POLLERS; at least 2; "
                             "default: the Temporal SDK's, 5 with one for new windows)")
    parser.add_argument("--sticky-schedule-to-start", type=sticky_schedule_to_start, metavar="SECONDS",
                        # A string default goes through `type` only when the flag is not given: a bad
                        # variable fails `noderoll worker` alone, as the flag would.
                        default=os.environ.get(ENV_STICKY_SCHEDULE_TO_START) or STICKY_SCHEDULE_TO_START_SECONDS,
                        help="seconds a workflow task waits on this worker's sticky queue (where the run is "
                             "cached) before any worker gets it with the whole history to replay (env "
                             f"{ENV_STICKY_SCHEDULE_TO_START}; default {STICKY_SCHEDULE_TO_START_SECONDS:g})")
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


async def serve(settings: ServiceSettings, stop: asyncio.Event) -> None:
    """Run the worker until `stop` is set."""
    started = await start_service(settings, "worker")
    client = started.client
    # `noderoll version` reads the version of every running worker from its identity, and the guard
    # of other clusters' workers their cluster name and Kubernetes cluster (service/cluster_guard.py).
    identity = worker_identity(started.identity.cluster, started.identity.kube)
    slots = settings.max_concurrent_activities
    with ThreadPoolExecutor(max_workers=activity_threads(slots), thread_name_prefix="activity") as pool:
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            workflows=WORKFLOWS,
            activities=ACTIVITIES,
            activity_executor=pool,
            max_concurrent_activities=slots,
            max_concurrent_local_activities=LOCAL_ACTIVITY_SLOTS,
            **polling(settings.workflow_task_pollers),
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.sticky_schedule_to_start_seconds),
            graceful_shutdown_timeout=timedelta(seconds=10),
            identity=identity,
        )
        log.info("worker on %s namespace=%s task_queue=%s cluster=%s kubeconfig=%s activity slots=%d "
                 "workflow task pollers=%s sticky schedule-to-start=%gs", settings.temporal_address, settings.namespace, settings.task_queue,
                 settings.cluster or "none", settings.kubeconfig or "in-cluster", slots,
                 settings.workflow_task_pollers or "the SDK's", settings.sticky_schedule_to_start_seconds)
        if not settings.cluster:
            async with worker:
                await stop.wait()
            return
        promotion = Worker(client, task_queue=GLOBAL_TASK_QUEUE, workflows=GLOBAL_WORKFLOWS, identity=identity,
                           graceful_shutdown_timeout=timedelta(seconds=10))
        log.info("and the promotion across clusters on task queue %s", GLOBAL_TASK_QUEUE)
        async with worker, promotion:
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
