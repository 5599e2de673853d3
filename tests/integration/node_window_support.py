"""Helpers of the node window integration tests: a worker, requests, node and stage pod reads, a PDB watch.

The worker runs the real node workflow and the real activities against the session stack; the
fleet is replaced by `ResultCollector` (it only collects `window_result` signals): `Window.request`
sends what a fleet sends (a `WindowRequest`, signal-with-start `window`), `Window.results` reads the
answers back, one `Answer` per Package.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Worker

import kube
from api.keys import NODE_STATE_ANNOTATION, PACKAGE_POD_NAMESPACE
from api.node_state import NodeState, parse_node_state
from api.stage_containers import is_copy, pod_packages, split_container
from protocol.fleet import PackageOrder, WindowRequest
from protocol.names import SIGNAL_WINDOW, node_workflow_id
from protocol.node import NodeWorkflowInput
from tests.helpers import assert_eventually, new_task_queue
from tests.helpers.stagepods import StagePodRecorder
from tests.workflows.node_collector import ResultCollector
from tests.workflows.node_harness import Answer
from worker.registry import ACTIVITIES, WORKFLOWS
from workflows.node import NodeWorkflow

T = TypeVar("T")


def fast_settings(node: str, **overrides: Any) -> NodeWorkflowInput:
    """Bounds short enough for tests: 2 attempts, 1 s backoff, 5 s heartbeats."""
    values: dict[str, Any] = dict(node=node, stage_attempts=2, retry_backoff_seconds=1.0,
                                  protected_pods_timeout_seconds=60, stage_timeout_seconds=60,
                                  reboot_timeout_seconds=60, heartbeat_seconds=5)
    values.update(overrides)
    return NodeWorkflowInput(**values)


@dataclass
class Window:
    """One node under test: its Temporal side (collector, task queue) and its Kubernetes side."""

    temporal: Client
    api: ApiClient
    node: str
    task_queue: str = field(default_factory=new_task_queue)
    collector: WorkflowHandle[Any, Any] | None = None
    # Every stage pod and pod of the node, recorded as they come (a window deletes them at its end).
    recorder: StagePodRecorder | None = None

    def __post_init__(self) -> None:
        self.recorder = StagePodRecorder(self.api, self.node).start()

    def close(self) -> None:
        """Stop recording (the fixtures call it)."""
        if self.recorder is not None:
            self.recorder.stop()

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    async def start_collector(self) -> None:
        self.collector = await self.temporal.start_workflow(
            ResultCollector.run, id=f"collector-{uuid.uuid4()}", task_queue=self.task_queue)

    async def window(self, *orders: PackageOrder, settings: NodeWorkflowInput | None = None,
                     workloads: dict[str, Any] | None = None) -> None:
        """Signal-with-start `node/<node>` with one request for `orders` (and a policy's `spec.workloads`)
        whose answer goes to the collector."""
        assert self.collector is not None
        request = WindowRequest(fleet_workflow_id=self.collector.id, request_id=str(uuid.uuid4()),
                                packages=list(orders), workloads=workloads)
        await self.temporal.start_workflow(
            NodeWorkflow.run, settings or fast_settings(self.node), id=node_workflow_id(self.node),
            task_queue=self.task_queue, start_signal=SIGNAL_WINDOW, start_signal_args=[request])

    async def request(self, package: str, spec: dict[str, Any], settings: NodeWorkflowInput | None = None) -> None:
        """One request carrying Package `package` alone."""
        await self.window(PackageOrder(package, spec, 1), settings=settings)

    async def results(self) -> list[Answer]:
        """One `Answer` per Package of every answer so far, in arrival order."""
        assert self.collector is not None
        return [Answer(name, o.state, o.version, o.stage, o.message, o.log_tail, w.request_id,
                       w.cordoned or w.drained or bool(w.interrupt))
                for w in await self.collector.query(ResultCollector.collected_windows)
                for name, o in sorted(w.outcomes.items())]

    def node_object(self) -> client.V1Node:
        return self.core.read_node(self.node)

    def state(self) -> NodeState:
        raw = (self.node_object().metadata.annotations or {}).get(NODE_STATE_ANNOTATION)
        state, problem = parse_node_state(raw)
        assert problem is None, problem
        return state

    def stage_pods(self) -> list[client.V1Pod]:
        """Every stage pod noderoll created for this node (recorded: a window deletes them at its end)."""
        assert self.recorder is not None
        return self.recorder.pods()

    def live_pods(self) -> list[str]:
        """Names of the node's stage pods the apiserver holds now."""
        return [p.metadata.name for p in self.core.list_namespaced_pod(
            PACKAGE_POD_NAMESPACE, label_selector=f"noderoll.io/node={self.node}").items]

    def config_map(self, pod: str) -> client.V1ConfigMap | None:
        """The ConfigMap of stage pod `pod` (recorded)."""
        assert self.recorder is not None
        return self.recorder.config_map(pod)

    def pods_of(self, name: str) -> list[str]:
        """Uids of every pod of that name (recorded: one, unless created again)."""
        assert self.recorder is not None
        return self.recorder.pods_of(name)

    def modes_run(self) -> list[str]:
        """Modes of this node's stage pods (a pod runs its stages and their checks: agent containers
        named after their modes, after the `package` copy container), sorted (creation timestamps
        have 1 s resolution)."""
        return sorted(split_container(c.name, pod_packages(j.metadata.labels, j.metadata.annotations))[1]
                      for j in self.stage_pods()
                      for c in [*(j.spec.init_containers or []), *j.spec.containers]
                      if not is_copy(c.name))

    def pod_modes(self) -> list[str]:
        """The stage (`noderoll.io/mode` label) of each of this node's stage pods, sorted."""
        return sorted(j.metadata.labels["noderoll.io/mode"] for j in self.stage_pods())

    def condition(self, kind: str) -> str | None:
        for condition in self.node_object().status.conditions or []:
            if condition.type == kind:
                return str(condition.status)
        return None


async def history_events(temporal: Client, node: str) -> int:
    """Events in the latest run of `node/<node>` (one run per window when nothing else queues)."""
    history = await temporal.get_workflow_handle(node_workflow_id(node)).fetch_history()
    return len(history.events)


@asynccontextmanager
async def in_process_worker(temporal: Client, kubeconfig: str, task_queue: str) -> AsyncIterator[Worker]:
    """The worker's workflows and activities (worker/registry.py) plus the collector, in this process."""
    kube.configure(kubeconfig)
    with ThreadPoolExecutor(max_workers=16) as pool:
        worker = Worker(temporal, task_queue=task_queue, workflows=[*WORKFLOWS, ResultCollector],
                        activities=ACTIVITIES, activity_executor=pool)
        async with worker:
            yield worker


async def close_workflows(temporal: Client, workflow_ids: list[str]) -> None:
    """Terminate what a test left running (a held erroring window, the collector)."""
    for workflow_id in workflow_ids:
        try:
            await temporal.get_workflow_handle(workflow_id).terminate("test cleanup")
        except RPCError:
            pass  # already closed


class HealthyPodsWatch:
    """Counts, on a background thread, the Ready, not-terminating pods matching a selector; keeps the minimum.

    That count is what a PodDisruptionBudget's `currentHealthy` is computed from, so `minimum` below
    `minAvailable` would be a PDB violation.
    """

    def __init__(self, api: ApiClient, namespace: str, selector: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.selector = namespace, selector
        self.minimum: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def healthy(self) -> int:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        return sum(
            1 for p in pods
            if p.metadata.deletion_timestamp is None and p.status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            count = self.healthy()
            self.minimum = count if self.minimum is None else min(self.minimum, count)
            self.samples += 1
            self._stop.wait(0.1)

    def __enter__(self) -> HealthyPodsWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def cordon(core: client.CoreV1Api, node: str, on: bool) -> None:
    """Cordon or uncordon as an operator would (no noderoll annotation)."""
    core.patch_node(node, {"spec": {"unschedulable": on or None}})


def wait_pods_running(core: client.CoreV1Api, namespace: str, selector: str, count: int, node: str) -> None:
    def running() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        placed = [p for p in pods if p.spec.node_name == node and p.status.phase == "Running"]
        assert len(placed) == count, [(p.metadata.name, p.spec.node_name, p.status.phase) for p in pods]
        return True

    assert_eventually(running, timeout=30)


async def _activity_events(temporal: Client, node: str, activity_type: str, kind: str) -> list[Any]:
    """The `<kind>` event attributes (`activity_task_completed`, `activity_task_started`) of every
    `activity_type` in the latest run of `node/<node>`, in history order."""
    history = await temporal.get_workflow_handle(node_workflow_id(node)).fetch_history()
    scheduled: dict[int, str] = {}
    found: list[Any] = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        if event.HasField(f"{kind}_event_attributes"):
            attrs = getattr(event, f"{kind}_event_attributes")
            if scheduled.get(attrs.scheduled_event_id) == activity_type:
                found.append(attrs)
    return found


async def activity_results(temporal: Client, node: str, activity_type: str, result_type: type[T]) -> list[T]:
    """Decoded results of every completed `activity_type` in the latest run of `node/<node>`."""
    results: list[T] = []
    for attrs in await _activity_events(temporal, node, activity_type, "activity_task_completed"):
        [value] = await temporal.data_converter.decode(list(attrs.result.payloads), [result_type])
        results.append(value)
    return results


async def activity_attempts(temporal: Client, node: str, activity_type: str) -> list[int]:
    """The attempt that completed each `activity_type` in the latest run of `node/<node>` (1: no retry)."""
    return [attrs.attempt for attrs in await _activity_events(temporal, node, activity_type, "activity_task_started")]


HISTORY_DIR_ENV = "NODEROLL_RECORD_HISTORIES"


async def record_history(temporal: Client, node: str, name: str) -> None:
    """With `NODEROLL_RECORD_HISTORIES=<dir>`, save the node workflow's history as `<dir>/<name>.json`.

    The replay test (tests/workflows/test_replay.py) replays the committed ones, so a change to
    the workflow that breaks determinism fails there; re-record with this variable after a
    deliberate, `workflow.patched`-guarded change.
    """
    target = os.environ.get(HISTORY_DIR_ENV)
    if not target:
        return
    history = await temporal.get_workflow_handle(node_workflow_id(node)).fetch_history()
    Path(target).mkdir(parents=True, exist_ok=True)
    (Path(target) / f"{name}.json").write_text(history.to_json())
