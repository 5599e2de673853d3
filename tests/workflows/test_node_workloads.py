"""A node window under its policy's `spec.workloads` (notice, drain rules, skip), on the time-skipping server
with fake activities registered under the real names (`tests/workflows/node_harness.py`)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from api.node_state import parse_node_state
from planning.node.drain_rules import SKIPPED_DRAIN_TIMEOUT
from protocol import errors
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import Harness, harness, order

pytestmark = pytest.mark.workflows
REBOOT = {"type": "reboot"}
WAIT_RULE = {"gpuPods": True, "action": "WaitForCompletion", "timeoutSeconds": 900}


def a_node(**fields: object) -> FakeNode:
    return FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", **fields)  # type: ignore[arg-type]


async def timers(h: Harness) -> list[timedelta]:
    """The durable timers the node workflow's latest run started."""
    history = await h.client.get_workflow_handle(h.workflow_id).fetch_history()
    return [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() for e in history.events
            if e.HasField("timer_started_event_attributes")]


async def test_the_notice_comes_after_the_cordon_and_the_drain_after_the_notice(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    workloads = {"noticeSeconds": 120, "rules": [WAIT_RULE]}
    async with harness(temporal_test_env, a_node(notice_pods=["ml/trainer-0"])) as h:
        await h.window(order("kernel", interrupt=REBOOT), workloads=workloads)
        [result] = await h.results(1, seconds=400)
        assert result.state == "complete"
        assert h.node.names()[:5] == ["read_node", "write_node_state", "cordon_node", "announce_eviction",
                                      "drain_node"]
        notice = h.node.call("announce_eviction")
        assert notice.rules == [WAIT_RULE] and notice.fleet == h.collector.id
        # A durable timer of the whole notice once the pods were told (the drain starts no earlier).
        [timer] = await timers(h)
        assert timer == timedelta(seconds=120)
        drain = h.node.call("drain_node")
        assert (drain.rules, drain.notice_seconds) == ([WAIT_RULE], 120)
        # The close takes the notice back.
        assert h.node.call("close_window").clear_notice


async def test_no_pod_to_tell_means_no_wait(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, a_node()) as h:
        await h.window(order("kernel", interrupt=REBOOT), workloads={"noticeSeconds": 600})
        [result] = await h.results(1)
        assert result.state == "complete"
        assert "announce_eviction" in h.node.names() and await timers(h) == []


async def test_a_policy_without_workloads_drains_as_before(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, a_node(notice_pods=["ml/trainer-0"])) as h:
        await h.window(order("kernel", interrupt=REBOOT), workloads={})
        [result] = await h.results(1)
        assert result.state == "complete"
        assert "announce_eviction" not in h.node.names()
        drain = h.node.call("drain_node")
        assert (drain.rules, drain.notice_seconds) == ([], 0)
        assert not h.node.call("close_window").clear_notice


async def test_a_timed_out_drain_with_skip_gives_the_node_up(temporal_test_env: WorkflowEnvironment) -> None:
    node = a_node(drain_error=errors.DRAIN_TIMEOUT)
    async with harness(temporal_test_env, node) as h:
        await h.window(order("kernel", interrupt=REBOOT), order("tuning"), workloads={"onDrainTimeout": "Skip"})
        [window] = await h.windows(1)
        assert window.skipped == SKIPPED_DRAIN_TIMEOUT and window.cordoned and not window.drained
        assert {o.state for o in window.outcomes.values()} == {"blocked"}
        assert all("drain timed out, node skipped" in o.message and "DrainTimeout" in o.message
                   for o in window.outcomes.values())
        assert h.node.modes() == []  # nothing ran on the host
        close = h.node.call("close_window")
        assert close.uncordon and not h.node.unschedulable
        assert (close.state.status, close.state.skipped) == ("blocked", SKIPPED_DRAIN_TIMEOUT)
        assert "DrainSkipped" in [e.reason for e in close.state.events]
        # Every Package keeps its record as before the window (none here: nothing recorded).
        state, problem = parse_node_state(close.state.state_annotation)
        assert problem is None and state.packages == {}
        # The window's first write removed any earlier skip label.
        assert h.node.writes[0].skipped == ""


async def test_skip_keeps_an_earlier_record_and_fails_what_is_not_a_timeout(
    temporal_test_env: WorkflowEnvironment,
) -> None:
    recorded = '{"packages": {"kernel": {"version": "0.9.0", "state": "complete", "stage": "post-interrupt"}}}'
    async with harness(temporal_test_env, a_node(drain_error=errors.DRAIN_TIMEOUT, state_annotation=recorded)) as h:
        await h.window(order("kernel", interrupt=REBOOT), workloads={"onDrainTimeout": "Skip"})
        [result] = await h.results(1)
        assert result.state == "blocked"
        state, _ = parse_node_state(h.node.call("close_window").state.state_annotation)
        assert (state.packages["kernel"].version, state.packages["kernel"].state) == ("0.9.0", "complete")
    # emptyDir data is no timeout: the window fails as before.
    async with harness(temporal_test_env, a_node(drain_error=errors.DRAIN_BLOCKED)) as h:
        await h.window(order("kernel", interrupt=REBOOT), workloads={"onDrainTimeout": "Skip"})
        [window] = await h.windows(1)
        assert window.skipped == "" and window.outcomes["kernel"].state == "erroring"
        assert h.node.call("close_window").state.skipped == ""


async def test_an_invalid_workloads_field_runs_nothing(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, a_node()) as h:
        await h.window(order("kernel", interrupt=REBOOT), workloads={"rules": [{"action": "Evicts"}]})
        [result] = await h.results(1)
        assert result.state == "blocked" and result.message.startswith(f"{errors.INVALID_SPEC}: spec.workloads")
        assert h.node.names() == ["read_node"]
