"""Node workflow on the time-skipping server with fake activities registered under the real names."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.leases import acquire_lease
from api.keys import node_workflow_id
from api.node_state import parse_node_state
from protocol import errors
from protocol.names import SEARCH_ATTRIBUTE_TYPES
from tests.workflows.node_collector import ResultCollector
from tests.workflows.node_fakes import FakeNode
from workflows.budget import BudgetWorkflow
from workflows.messages import (
    QUERY_BUDGET_STATUS,
    SIGNAL_NODE_CANCEL,
    SIGNAL_NODE_REQUEST,
    SIGNAL_NODE_RETRY,
    BudgetRef,
    BudgetStatus,
    NodeCancel,
    NodeRequest,
    NodeResult,
    NodeWorkflowInput,
)
from workflows.node import NodeWorkflow

pytestmark = pytest.mark.workflows


def a_spec(version: str = "1.0.0", **fields: Any) -> dict[str, Any]:
    """A valid Package spec dict (by alias), e.g. `a_spec(interrupt={"type": "reboot"})`."""
    return {"version": version, "image": f"registry.local/pkg:{version}", **fields}


@dataclass
class Harness:
    """One node, its fakes, a result collector (the stand-in rollout) and helpers."""

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

    async def request(self, package: str, spec: dict[str, Any], **kw: Any) -> None:
        settings = kw.pop("settings", None) or NodeWorkflowInput(
            node=self.node.name, retry_backoff_seconds=10, stage_attempts=3)
        request = NodeRequest(rollout_workflow_id=self.collector.id, package=package, spec=spec,
                              generation=kw.pop("generation", 1), request_id=kw.pop("request_id", str(uuid.uuid4())),
                              **kw)
        await self.client.start_workflow(
            NodeWorkflow.run, settings, id=self.workflow_id, task_queue=self.task_queue,
            start_signal=SIGNAL_NODE_REQUEST, start_signal_args=[request])

    async def results(self, count: int, seconds: int = 200) -> list[NodeResult]:
        """Poll (virtual time, at most `seconds`) until the collector holds `count` results."""
        got: list[NodeResult] = []
        for _ in range(seconds):
            got = await self.collector.query(ResultCollector.collected)
            if len(got) >= count:
                break
            await self.env.sleep(timedelta(seconds=1))
        return got

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
    """Worker with the node workflow, the fakes, the real budget workflow and the real lease activity.

    `before(h)` runs before the worker starts: requests sent there are all queued for the first window.
    """
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
            worker = Worker(env.client, task_queue=task_queue,
                            workflows=[NodeWorkflow, ResultCollector, BudgetWorkflow],
                            activities=[*fake.activities(), acquire_lease], activity_executor=pool)
            async with worker:
                yield h
    finally:
        # Leftover timers on the shared time-skipping server would block time skipping later.
        for workflow_id in (collector.id, h.workflow_id):
            try:
                await env.client.get_workflow_handle(workflow_id).terminate("test cleanup")
            except RPCError:
                pass


async def test_one_package_without_interrupt_runs_stages_and_checks_only(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("sysctl", a_spec())
        [result] = await h.results(1)
        assert (result.state, result.disrupted) == ("complete", False)
        assert h.node.modes() == ["apply", "apply-check", "config", "config-check"]
        assert "cordon_node" not in h.node.names() and "drain_node" not in h.node.names()
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED
        state, problem = parse_node_state(h.node.state_annotation)
        assert problem is None and state.packages["sysctl"].state == "complete"
        assert state.packages["sysctl"].stage == "config"
        assert h.node.status_label == "complete"
        # Two state writes per window: start and end.
        assert h.node.names().count("write_node_state") == 2
        events = await h.history_events()
        print(f"history events for one package without interrupt: {events}")
        assert events < 100


async def test_a_stage_and_its_check_are_one_job_and_a_failing_check_is_reported_as_the_check(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits={"apply-check": [4, 4, 4]})
    async with harness(temporal_test_env, node) as h:
        await h.request("sysctl", a_spec())
        [result] = await h.results(1)
        assert (result.state, result.stage) == ("erroring", "apply")
        assert result.message.startswith("apply-check failed after 3 attempts (exit code 4)")
        assert "apply-check exited 4" in result.log_tail
        # One Job per attempt, each running the stage then its check.
        assert h.node.modes() == ["apply", "apply-check"] * 3
        assert len(set(h.node.jobs)) == 3
        state, _ = parse_node_state(h.node.state_annotation)
        assert "apply-check failed" in (state.packages["sysctl"].last_error or "")


async def test_a_node_deleted_during_its_window_ends_it_without_retries(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", deleted_at="config")
    async with harness(temporal_test_env, node) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert result.state == "erroring" and "does not exist" in result.message
        assert h.node.modes() == ["apply", "apply-check"]  # config was not retried
        # Nothing written to (or uncordoned on) the deleted node after its deletion.
        assert h.node.names()[-1] == "run_stage_pod"
        # Nothing held for a retry: the workflow completes.
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED


async def test_reboot_package_cordons_drains_interrupts_and_uncordons(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert (result.state, result.disrupted) == ("complete", True)
        assert h.node.names()[:4] == ["read_node", "write_node_state", "cordon_node", "drain_node"]
        assert h.node.modes() == ["apply", "apply-check", "config", "config-check", "interrupt:reboot",
                                  "post-interrupt", "post-interrupt-check"]
        # Two stage pods (issue #14): everything before the interrupt, the interrupt last, then the rest.
        assert [job.modes for job in h.node.stage_jobs()] == [
            ["apply", "apply-check", "config", "config-check", "interrupt"], ["post-interrupt", "post-interrupt-check"]]
        assert "run_interrupt" not in h.node.names() and "run_stage_job" not in h.node.names()
        # Once the outcome is written, the window's stage Jobs go.
        assert h.node.names()[-3:] == ["uncordon_node", "write_node_state", "delete_stage_jobs"]
        assert h.node.cleanups == [(["kernel"], [])]
        assert not h.node.unschedulable
        state, _ = parse_node_state(h.node.state_annotation)
        assert (state.packages["kernel"].stage, state.packages["kernel"].state) == ("post-interrupt", "complete")
        print(f"history events for one reboot package: {await h.history_events()}")


async def test_an_api_outage_of_minutes_stalls_the_window_but_fails_nothing_and_leaves_nothing_cordoned(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    # An apiserver restart on a busy control plane outlasted the old 5 drain attempts (30 s of backoff);
    # the waits now outlast 5 minutes of outage, uncordon and the final state retry until it ends.
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", outage={"drain_node": 8, "uncordon_node": 20})
    async with harness(temporal_test_env, node) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1, seconds=3600)
        assert (result.state, result.disrupted) == ("complete", True)
        assert h.node.names().count("drain_node") == 9
        assert h.node.names().count("uncordon_node") == 21
        assert not h.node.unschedulable
        assert h.node.writes[-1].status == "complete"


async def test_two_packages_share_one_merged_interrupt(temporal_test_env: WorkflowEnvironment) -> None:
    async def queue_both(h: Harness) -> None:
        await h.request("containerd-cfg", a_spec(interrupt={"type": "service", "services": ["containerd"]}))
        await h.request("cron-cfg", a_spec(interrupt={"type": "service", "services": ["cron"]}))

    async with harness(temporal_test_env, before=queue_both) as h:
        results = await h.results(2)
        assert sorted(r.state for r in results) == ["complete", "complete"]
        interrupts = h.node.interrupts()
        assert len(interrupts) == 1
        assert interrupts[0].interrupt == {"type": "service", "services": ["containerd", "cron"]}
        assert h.node.names().count("drain_node") == 1


async def test_leases_from_two_budgets_are_taken_in_order_and_all_released(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    policy = f"p-{uuid.uuid4().hex[:8]}"

    async def queue_both(h: Harness) -> None:
        await h.request("a", a_spec(interrupt={"type": "reboot"}), budget=BudgetRef(policy, "gpu", 1))
        await h.request("b", a_spec(interrupt={"type": "reboot"}), budget=BudgetRef(policy, "cpu", 1))

    async with harness(temporal_test_env, before=queue_both) as h:
        results = await h.results(2)
        assert [r.state for r in results] == ["complete", "complete"]
        assert len(h.node.interrupts()) == 1
        for compartment in ("cpu", "gpu"):
            budget = h.client.get_workflow_handle(f"budget/{policy}/{compartment}")
            status = await budget.query(QUERY_BUDGET_STATUS, result_type=BudgetStatus)
            for _ in range(10):
                if status.in_use == 0:
                    break
                await h.env.sleep(timedelta(seconds=1))
                status = await budget.query(QUERY_BUDGET_STATUS, result_type=BudgetStatus)
            assert status.in_use == 0
            await budget.terminate("test cleanup")


async def test_failed_stage_is_retried_with_backoff_then_erroring_until_retry(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits={"apply": [1, 1, 1, 0]})
    async with harness(temporal_test_env, node) as h:
        started = await h.env.get_current_time()
        await h.request("driver", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert (result.state, result.stage) == ("erroring", "apply")
        assert "last line" in result.log_tail
        # Backoff 10 s then 20 s between the three attempts (virtual time).
        assert await h.env.get_current_time() - started >= timedelta(seconds=30)
        assert h.node.modes() == ["apply", "apply", "apply"]
        assert len(set(h.node.jobs)) == 3  # a new Job per attempt
        # Drained before the failure: the node stays cordoned and the state says why.
        assert h.node.unschedulable and "uncordon_node" not in h.node.names()
        state, _ = parse_node_state(h.node.state_annotation)
        entry = state.packages["driver"]
        assert (entry.stage, entry.state, entry.attempts) == ("apply", "erroring", 3)
        assert "exit code 1" in (entry.last_error or "")
        assert h.node.status_label == "erroring"
        handle = h.client.get_workflow_handle(h.workflow_id)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await handle.signal(SIGNAL_NODE_RETRY)
        results = await h.results(2)
        assert results[1].state == "complete"
        assert not h.node.unschedulable
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED


async def test_node_cordoned_by_someone_else_stays_cordoned(temporal_test_env: WorkflowEnvironment) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", unschedulable=True, cordoned_by="")
    async with harness(temporal_test_env, node) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert result.state == "complete"
        assert h.node.unschedulable and "uncordon_node" not in h.node.names()


async def test_dependent_waits_queued_until_its_dependency_completes(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("nvidia-driver", a_spec(dependsOn={"kernel": "1.0.0"}))
        for _ in range(5):
            await h.env.sleep(timedelta(seconds=1))
        assert h.node.modes() == []
        assert await h.collector.query(ResultCollector.collected) == []
        await h.request("kernel", a_spec())
        results = await h.results(2)
        assert [r.package for r in results] == ["kernel", "nvidia-driver"]
        assert [r.state for r in results] == ["complete", "complete"]


async def test_budget_lease_is_taken_before_cordon_and_released_after(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    policy = f"p-{uuid.uuid4().hex[:8]}"
    async with harness(temporal_test_env) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}), budget=BudgetRef(policy, "gpu", 1))
        [result] = await h.results(1)
        assert result.state == "complete"
        budget = h.client.get_workflow_handle(f"budget/{policy}/gpu")
        status = await budget.query(QUERY_BUDGET_STATUS, result_type=BudgetStatus)
        for _ in range(10):
            if status.in_use == 0:
                break
            await h.env.sleep(timedelta(seconds=1))
            status = await budget.query(QUERY_BUDGET_STATUS, result_type=BudgetStatus)
        assert (status.in_use, status.limit) == (0, 1)
        await budget.terminate("test cleanup")


async def test_duplicate_request_is_dropped_and_invalid_spec_is_answered(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("bad", {"version": "not a version", "image": "x"})
        [result] = await h.results(1)
        assert result.state == "erroring" and "InvalidSpec" in result.message
        await h.request("sysctl", a_spec(), request_id="same")
        await h.request("sysctl", a_spec(), request_id="same")
        results = await h.results(2)
        assert [r.package for r in results] == ["bad", "sysctl"]
        assert h.node.modes().count("apply") == 1


async def test_up_to_date_package_is_answered_without_a_window(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("sysctl", a_spec())
        await h.results(1)
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED
        await h.request("sysctl", a_spec())
        results = await h.results(2)
        assert results[1].state == "complete"
        assert h.node.modes().count("apply") == 1


async def test_drain_timeout_fails_the_window_names_blockers_and_uncordons(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", drain_error=errors.DRAIN_TIMEOUT)
    async with harness(temporal_test_env, node) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert (result.state, result.stage) == ("erroring", "drain")
        assert "DrainTimeout" in result.message and "ns/solo-pdb" in result.message
        assert h.node.modes() == []  # no stage ran on a node that was not drained
        assert not h.node.unschedulable  # the host was not touched: the cordon is undone
        state, _ = parse_node_state(h.node.state_annotation)
        assert state.packages["kernel"].state == "erroring"
        assert "ns/solo" in (state.packages["kernel"].last_error or "")


async def test_new_spec_replaces_a_held_erroring_request(temporal_test_env: WorkflowEnvironment) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits={"apply": [1, 1, 1]})
    async with harness(temporal_test_env, node) as h:
        await h.request("sysctl", a_spec("1.0.0"))
        [first] = await h.results(1)
        assert first.state == "erroring"
        await h.request("sysctl", a_spec("1.0.1"), generation=2)
        results = await h.results(2)
        assert (results[1].state, results[1].version) == ("complete", "1.0.1")
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED


async def test_uninstall_runs_uninstall_stage_and_removes_the_entry(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("sysctl", a_spec(uninstall={"enabled": True}))
        await h.results(1)
        await h.request("sysctl", a_spec(uninstall={"enabled": True}), uninstall=True)
        results = await h.results(2)
        assert results[1].state == "complete"
        assert h.node.modes()[-2:] == ["uninstall", "uninstall-check"]
        state, _ = parse_node_state(h.node.state_annotation)
        assert "sysctl" not in state.packages


async def test_cancel_withdraws_a_queued_request(temporal_test_env: WorkflowEnvironment) -> None:
    async def queue_then_cancel(h: Harness) -> None:
        await h.request("sysctl", a_spec())
        await h.client.get_workflow_handle(h.workflow_id).signal(
            SIGNAL_NODE_CANCEL, NodeCancel(rollout_workflow_id=h.collector.id, package="sysctl"))

    async with harness(temporal_test_env, before=queue_then_cancel) as h:
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED
        assert h.node.modes() == []
        assert await h.collector.query(ResultCollector.collected) == []


async def test_the_erroring_condition_follows_the_record_not_only_this_windows_failures(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    # The label says `erroring` while any package's record does; the condition must say the same,
    # also in a later window that fails nothing (the package that failed earlier still waits).
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits={"apply": [1, 1, 1]})
    async with harness(temporal_test_env, node) as h:
        await h.request("sysctl", a_spec("1.0.0"))
        [first] = await h.results(1)
        assert first.state == "erroring"
        assert (h.node.writes[-1].status, h.node.writes[-1].erroring) == ("erroring", True)
        await h.request("driver", a_spec("2.0.0"))
        results = await h.results(2)
        assert (results[1].package, results[1].state) == ("driver", "complete")
        state, _ = parse_node_state(h.node.state_annotation)
        assert state.packages["sysctl"].state == "erroring"
        last = h.node.writes[-1]
        assert (last.status, last.erroring) == ("erroring", True), last
        assert "sysctl" in last.message
