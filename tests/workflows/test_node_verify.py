"""The GPU verify of a node window (`spec.verify`, issue 44 item 4) on the time-skipping server with fake
activities: when it runs, the pod created ahead by the last post-interrupt pod, what a failure answers
and leaves on the node, a window without a verify on a node whose verify failed, `retry`'s window run
again, `onFailure: Uncordon`, and an invalid verify that runs nothing."""

from __future__ import annotations

import uuid

import pytest
from temporalio.testing import WorkflowEnvironment

from activities.pod_create import pod_name
from api.node_state import parse_node_state
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import a_spec, harness

pytestmark = pytest.mark.workflows
REBOOT = {"type": "reboot"}
IMAGE = "registry.local/gpu-verify:1"
VERIFY = {"image": IMAGE, "timeoutSeconds": 120}


def node(**exits: list[int]) -> FakeNode:
    return FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits=dict(exits))


def verify_calls(fake: FakeNode) -> list[object]:
    return [arg for name, arg in fake.calls if name == "run_verify_pod"]


async def test_a_verify_runs_after_the_post_interrupt_pod_which_creates_it(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node()) as h:
        await h.request("driver", a_spec(interrupt=REBOOT), verify=VERIFY)
        [result] = await h.results(1)
        assert (result.state, result.stage) == ("complete", "post-interrupt")
        assert h.node.ran[-3:] == ["post-interrupt", "post-interrupt-check", "verify"]
        [call] = verify_calls(h.node)
        assert (call.job.mode, call.job.image, call.job.timeout_seconds) == ("verify", IMAGE, 120)
        assert pod_name(call.job) in h.node.adopted  # created ahead by the post-interrupt pod (ADR 0022)
        assert not h.node.unschedulable and h.node.status_label == "complete"
        assert parse_node_state(h.node.state_annotation)[0].verify_failed is None


async def test_no_interrupt_no_verify_and_no_request_for_one_none(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node()) as h:
        await h.request("config-only", a_spec(), verify=VERIFY)
        assert [r.state for r in await h.results(1)] == ["complete"]
        # (One request at a time: the stand-in fleet's newer request would replace a queued one.)
        await h.request("rebooted", a_spec(interrupt=REBOOT))
        assert [r.state for r in await h.results(2)] == ["complete", "complete"]
        assert verify_calls(h.node) == []


async def test_a_failed_verify_then_a_window_without_one_then_retry(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node(verify=[3, 0])) as h:
        await h.request("driver", a_spec(interrupt=REBOOT), verify=VERIFY)
        [failed] = await h.results(1)
        assert (failed.state, failed.stage) == ("erroring", "verify")
        assert failed.message == f"complete on the host; GPU verify {IMAGE} failed (exit code 3)"
        assert failed.log_tail == "GPU 0: Fail"
        state = parse_node_state(h.node.state_annotation)[0]
        assert state.packages["driver"].state == "complete" and state.verify_failed is not None
        assert state.verify_failed.packages == ["driver"] and state.verify_failed.image == IMAGE
        assert h.node.unschedulable and h.node.cordoned_by == "noderoll" and h.node.status_label == "verify-failed"
        assert h.node.writes[-1].erroring and "verify: GPU verify" in h.node.writes[-1].message
        [call] = verify_calls(h.node)
        assert h.node.cleanups[-1][1] == [pod_name(call.job)]  # the failed verify pod is kept

        # A new version without a verify (the policy's removed): it runs, the record and the cordon stay.
        await h.request("driver", a_spec("2.0.0", interrupt=REBOOT))
        answer = (await h.results(2))[-1]
        assert (answer.state, answer.version) == ("complete", "2.0.0")
        assert len(verify_calls(h.node)) == 1
        assert h.node.unschedulable and h.node.status_label == "verify-failed"
        assert parse_node_state(h.node.state_annotation)[0].verify_failed is not None
        events = [e.reason for e in h.node.writes[-1].events]
        assert "VerifyPending" in events and "LeftCordoned" in events, events

        # retry: the window of 2.0.0 again (its whole install sequence, nothing else had work), then the verify.
        ran = len(h.node.ran)
        await h.request("driver", a_spec("2.0.0", interrupt=REBOOT), verify=VERIFY)
        retried = (await h.results(3))[-1]
        assert retried.state == "complete"
        assert h.node.ran[ran:][0] == "apply" and h.node.ran[-1] == "verify"
        assert not h.node.unschedulable and h.node.status_label == "complete"
        assert parse_node_state(h.node.state_annotation)[0].verify_failed is None


async def test_on_failure_uncordon_lifts_the_cordon(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node(verify=[1])) as h:
        await h.request("driver", a_spec(interrupt=REBOOT), verify={**VERIFY, "onFailure": "Uncordon"})
        [result] = await h.results(1)
        assert (result.state, result.stage) == ("erroring", "verify")
        assert not h.node.unschedulable and h.node.status_label == "verify-failed"


async def test_an_invalid_verify_runs_nothing_and_says_why(temporal_test_env: WorkflowEnvironment) -> None:
    async with harness(temporal_test_env, node()) as h:
        await h.request("driver", a_spec(interrupt=REBOOT), verify={"image": IMAGE, "onFailure": "Reboot"})
        [result] = await h.results(1)
        assert result.state == "erroring" and result.message.startswith("InvalidSpec: spec.verify.onFailure: Input should be")
        assert h.node.ran == [] and not h.node.unschedulable
