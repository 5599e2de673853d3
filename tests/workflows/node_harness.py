"""The node workflow on the time-skipping server, driven as a fleet drives it, with fake activities.

`harness(env)` runs a worker with the real `NodeWorkflow`, the fake node activities (`FakeNode`)
and a `ResultCollector` standing in for the fleet: requests go to `node/<node>` by signal-with-start
`window` (a `WindowRequest`, as `request_windows` sends them) and the answers (`window_result`)
are collected. `Harness.request` sends one Package, `Harness.window` several in one request;
`Harness.results` flattens the answers into one `Answer` per Package, in arrival order.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from protocol.fleet import PackageOrder, WindowRequest, WindowResult
from protocol.names import SEARCH_ATTRIBUTE_TYPES, SIGNAL_WINDOW, node_workflow_id
from protocol.node import NodeWorkflowInput
from tests.workflows.node_collector import ResultCollector
from tests.workflows.node_fakes import FakeNode
from workflows.node import NodeWorkflow


def a_spec(version: str = "1.0.0", **fields: Any) -> dict[str, Any]:
    """A valid Package spec dict (by alias), e.g. `a_spec(interrupt={"type": "reboot"})`."""
    return {"version": version, "image": f"registry.local/pkg:{version}", **fields}


def order(name: str, spec: dict[str, Any] | None = None, **fields: Any) -> PackageOrder:
    """A fleet's order for Package `name` (`spec`, else `a_spec(**fields)`), generation 1."""
    return PackageOrder(name=name, spec=spec if spec is not None else a_spec(**fields), generation=1)


@dataclass
class Answer:
    """One Package's outcome in one window answer, with the window's disruption."""

    package: str
    state: str
    version: str
    stage: str | None
    message: str
    log_tail: str
    request_id: str
    # The window cordoned, drained or interrupted the node.
    disrupted: bool


@dataclass
class Harness:
    """One node, its fakes, a result collector (the stand-in fleet) and helpers."""

    env: WorkflowEnvironment
    task_queue: str
    node: FakeNode
    collector: WorkflowHandle[Any, Any]

    @property
    def client(self) -> Client:
        return self.env.client

    @property
    def workflow_id(self) -> str:
        return node_workflow_id(self.node.name)

    def settings(self) -> NodeWorkflowInput:
        """Short backoff and 3 attempts (the tests' default failure policy)."""
        return NodeWorkflowInput(node=self.node.name, retry_backoff_seconds=10, stage_attempts=3)

    async def window(self, *orders: PackageOrder, request_id: str = "", node_order: int = 0,
                     settings: NodeWorkflowInput | None = None, workloads: dict[str, Any] | None = None,
                     verify: dict[str, Any] | None = None) -> str:
        """Signal-with-start `window` with one request for `orders` (and the policy's `spec.workloads` and
        `verify`); returns its request id."""
        request_id = request_id or f"{self.collector.id}:{uuid.uuid4().hex[:8]}:{self.node.name}"
        request = WindowRequest(fleet_workflow_id=self.collector.id, request_id=request_id,
                                packages=list(orders), node_order=node_order, workloads=workloads, verify=verify)
        await self.client.start_workflow(
            NodeWorkflow.run, settings or self.settings(), id=self.workflow_id, task_queue=self.task_queue,
            start_signal=SIGNAL_WINDOW, start_signal_args=[request])
        return request_id

    async def request(self, package: str, spec: dict[str, Any], *, generation: int = 1, uninstall: bool = False,
                      **kw: Any) -> str:
        """One request carrying Package `package` alone."""
        return await self.window(PackageOrder(package, spec, generation, uninstall=uninstall), **kw)

    async def windows(self, count: int, seconds: int = 200) -> list[WindowResult]:
        """Poll (virtual time, at most `seconds`) until the collector holds `count` window answers."""
        got: list[WindowResult] = []
        for _ in range(seconds):
            got = await self.collector.query(ResultCollector.collected_windows)
            if len(got) >= count:
                break
            await self.env.sleep(timedelta(seconds=1))
        return got

    async def results(self, count: int, seconds: int = 200) -> list[Answer]:
        """Poll until the answers hold `count` Package outcomes; one `Answer` per Package, in order."""
        answers: list[Answer] = []
        for _ in range(seconds):
            answers = [
                Answer(name, o.state, o.version, o.stage, o.message, o.log_tail, w.request_id,
                       w.cordoned or w.drained or bool(w.interrupt))
                for w in await self.collector.query(ResultCollector.collected_windows)
                for name, o in sorted(w.outcomes.items())
            ]
            if len(answers) >= count:
                break
            await self.env.sleep(timedelta(seconds=1))
        return answers

    async def closed(self) -> WorkflowExecutionStatus | None:
        """Status of the node workflow's latest run after waiting for it to close (virtual time)."""
        handle = self.client.get_workflow_handle(self.workflow_id)
        for _ in range(50):
            status = (await handle.describe()).status
            if status != WorkflowExecutionStatus.RUNNING:
                return status
            await self.env.sleep(timedelta(seconds=1))
        return WorkflowExecutionStatus.RUNNING

    async def history_events(self) -> int:
        history = await self.client.get_workflow_handle(self.workflow_id).fetch_history()
        return len(history.events)


_SNAKE = {"Keyword": "KEYWORD", "KeywordList": "KEYWORD_LIST"}


async def register_search_attributes(client: Client) -> None:
    """Register noderoll's search attributes on the time-skipping server (the tooling does it elsewhere)."""
    request = AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={name: IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{_SNAKE[kind]}")
                           for name, kind in SEARCH_ATTRIBUTE_TYPES.items()},
    )
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as err:
        if "already" not in str(err).lower():
            raise


@asynccontextmanager
async def harness(
    env: WorkflowEnvironment, node: FakeNode | None = None, before: Callable[[Harness], Awaitable[None]] | None = None,
) -> AsyncIterator[Harness]:
    """Worker with the node workflow and the fakes; `before(h)` runs before the worker starts (requests sent
    there are queued before the first window)."""
    await register_search_attributes(env.client)
    task_queue = str(uuid.uuid4())
    fake = node or FakeNode(name=f"node-{uuid.uuid4().hex[:8]}")
    collector = await env.client.start_workflow(
        ResultCollector.run, id=f"collector-{uuid.uuid4()}", task_queue=task_queue)
    h = Harness(env, task_queue, fake, collector)
    try:
        if before is not None:
            await before(h)
        with ThreadPoolExecutor(max_workers=4) as pool:
            worker = Worker(env.client, task_queue=task_queue, workflows=[NodeWorkflow, ResultCollector],
                            activities=fake.activities(), activity_executor=pool)
            async with worker:
                yield h
    finally:
        # Leftover timers on the shared time-skipping server would block time skipping later.
        for workflow_id in (collector.id, h.workflow_id):
            try:
                await env.client.get_workflow_handle(workflow_id).terminate("test cleanup")
            except RPCError:
                pass
