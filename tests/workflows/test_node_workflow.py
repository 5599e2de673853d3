"""The node workflow on the time-skipping server with fake activities registered under the real names,
driven through the fleet's `window` request (`tests/workflows/node_harness.py`)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from api.node_state import parse_node_state
from protocol import errors
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import a_spec, harness, order

pytestmark = pytest.mark.workflows


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
        # Two state writes per window: start and end (the end's in `close_window`, issue #26 item 2).
        assert h.node.names() == ["read_node", "write_node_state", "run_stage_pod", "close_window"]
        assert len(h.node.writes) == 2 and not h.node.uncordons()
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
        # One pod per attempt, each running the stage then its check.
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
        # One pod per phase (ADR 0016): everything before the interrupt, the interrupt in its own pod, the rest.
        assert [job.modes for job in h.node.stage_jobs()] == [
            ["apply", "apply-check", "config", "config-check"], [], ["post-interrupt", "post-interrupt-check"]]
        assert h.node.names().count("run_interrupt") == 1
        # Once the outcome is written, the window's stage pods go.
        # Uncordon, final state and the pods' deletion: one activity (issue #26 item 2).
        assert h.node.names()[-1] == "close_window" and h.node.uncordons() == 1
        assert "uncordon_node" not in h.node.names() and "delete_stage_jobs" not in h.node.names()
        assert h.node.cleanups == [(["kernel"], [])]
        assert not h.node.unschedulable
        state, _ = parse_node_state(h.node.state_annotation)
        assert (state.packages["kernel"].stage, state.packages["kernel"].state) == ("post-interrupt", "complete")
        print(f"history events for one reboot package: {await h.history_events()}")


async def test_the_read_the_first_write_and_the_cordon_are_local_activities_of_the_first_workflow_task(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    """ADR 0020: the window's short calls before the drain run as local activities in the run's first
    workflow task (a marker each, no activity scheduled for them); the waits and the close stay activities."""
    async with harness(temporal_test_env) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert result.state == "complete"
        assert h.node.names()[:4] == ["read_node", "write_node_state", "cordon_node", "drain_node"]
        history = await h.client.get_workflow_handle(h.workflow_id).fetch_history()
        scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                     if e.HasField("activity_task_scheduled_event_attributes")]
        assert scheduled == ["drain_node", "run_stage_pod", "run_interrupt", "run_stage_pod", "close_window"]
        local = [e.event_id for e in history.events if e.HasField("marker_recorded_event_attributes")
                 and e.marker_recorded_event_attributes.marker_name == "core_local_activity"]
        completed = [e.event_id for e in history.events if e.HasField("workflow_task_completed_event_attributes")]
        drain = next(e.event_id for e in history.events if e.HasField("activity_task_scheduled_event_attributes"))
        # Three markers, recorded with the drain's scheduling by the run's first workflow task.
        assert len(local) == 3 and completed[0] < min(local) and max(local) < drain
        # Each with its summary, as the Temporal UI shows it (docs/operations.md).
        summaries = [e.user_metadata.summary.data for e in history.events if e.event_id in local]
        assert summaries == [b'"read node"', b'"state in-progress"', b'"cordon"']
        assert sum(1 for e in history.events if e.HasField("workflow_task_scheduled_event_attributes")) == 7


async def test_an_unreachable_api_during_the_cordon_is_retried_by_the_local_activity_and_logged(
    temporal_test_env: WorkflowEnvironment, caplog: pytest.LogCaptureFixture,
) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", outage={"cordon_node": 2, "read_node": 1})
    async with harness(temporal_test_env, node) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert (result.state, result.disrupted) == ("complete", True)
        assert h.node.names()[:6] == ["read_node", "read_node", "write_node_state", "cordon_node", "cordon_node",
                                      "cordon_node"]
        assert h.node.names().count("drain_node") == 1 and not h.node.unschedulable
    # A local activity is no pending activity in the Temporal UI: the worker's log names each failed attempt.
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Completing activity as failed")]
    assert sum("'activity_type': 'cordon_node'" in m for m in failed) == 2, failed


async def test_an_api_outage_of_minutes_stalls_the_window_but_fails_nothing_and_leaves_nothing_cordoned(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    # An apiserver restart on a busy control plane outlasted the old 5 drain attempts (30 s of backoff);
    # the waits now outlast 5 minutes of outage, uncordon and the final state retry until it ends.
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", outage={"drain_node": 8, "close_window": 20})
    async with harness(temporal_test_env, node) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1, seconds=3600)
        assert (result.state, result.disrupted) == ("complete", True)
        assert h.node.names().count("drain_node") == 9
        assert h.node.names().count("close_window") == 21
        assert not h.node.unschedulable
        assert h.node.writes[-1].status == "complete"


async def test_two_packages_share_one_merged_interrupt(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env) as h:
        await h.window(order("containerd-cfg", interrupt={"type": "service", "services": ["containerd"]}),
                       order("cron-cfg", interrupt={"type": "service", "services": ["cron"]}))
        results = await h.results(2)
        assert sorted(r.state for r in results) == ["complete", "complete"]
        interrupts = h.node.interrupts()
        assert len(interrupts) == 1
        assert interrupts[0].interrupt == {"type": "service", "services": ["containerd", "cron"]}
        assert h.node.names().count("drain_node") == 1


async def test_failed_stage_is_retried_with_backoff_then_erroring_until_asked_again(
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
        assert len(set(h.node.jobs)) == 3  # a new pod per attempt
        # Drained before the failure: the node stays cordoned and the state says why.
        assert h.node.unschedulable and not h.node.uncordons()
        state, _ = parse_node_state(h.node.state_annotation)
        entry = state.packages["driver"]
        assert (entry.stage, entry.state, entry.attempts) == ("apply", "erroring", 3)
        assert "exit code 1" in (entry.last_error or "")
        assert h.node.status_label == "erroring"
        # Nothing is held here: the fleet asks again (its `retry`), with a new request.
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED
        await h.request("driver", a_spec(interrupt={"type": "reboot"}))
        results = await h.results(2)
        assert results[1].state == "complete"
        # The new window resumed at the failed stage, and lifted the cordon the failure left.
        assert h.node.modes()[3] == "apply" and not h.node.unschedulable
        assert await h.closed() == WorkflowExecutionStatus.COMPLETED


async def test_node_cordoned_by_someone_else_stays_cordoned(temporal_test_env: WorkflowEnvironment) -> None:
    node = FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", unschedulable=True, cordoned_by="")
    async with harness(temporal_test_env, node) as h:
        await h.request("kernel", a_spec(interrupt={"type": "reboot"}))
        [result] = await h.results(1)
        assert result.state == "complete"
        assert h.node.unschedulable and not h.node.uncordons()


async def test_a_dependent_without_its_dependency_is_answered_blocked_and_runs_with_it(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    async with harness(temporal_test_env) as h:
        await h.request("nvidia-driver", a_spec(dependsOn={"kernel": "1.0.0"}))
        [alone] = await h.results(1)
        assert alone.state == "blocked" and "needs kernel 1.0.0" in alone.message, alone
        assert h.node.modes() == []
        await h.window(order("nvidia-driver", dependsOn={"kernel": "1.0.0"}), order("kernel"))
        results = (await h.results(3))[1:]
        assert [(r.package, r.state) for r in results] == [("kernel", "complete"), ("nvidia-driver", "complete")]
        assert h.node.modes() == ["apply", "apply-check", "config", "config-check"] * 2


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
        for _ in range(5):
            await h.env.sleep(timedelta(seconds=1))
        assert len(await h.results(2)) == 2, "the duplicate request was answered"
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


async def test_a_newer_version_after_a_failure_installs_the_newer_one(temporal_test_env: WorkflowEnvironment) -> None:
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
