"""A config operation that stopped after its config stage (node workflow, time-skipping server, fakes).

Issue #12 item 1: the window records the config it applies (`targetConfig`) when it starts, so the
next request for the same change (the fleet's `retry`) resumes at the failed interrupt, while a
newer desired config runs the config stage again before the interrupt.
"""

from __future__ import annotations

import uuid

import pytest
from temporalio.testing import WorkflowEnvironment

from api.enums import PlanAction, Stage, State
from api.node_state import NodeState, PackageNodeState, config_hashes, dump_node_state, parse_node_state
from tests.workflows.node_fakes import FakeNode
from tests.workflows.node_harness import a_spec, harness

pytestmark = pytest.mark.workflows
FIRST = {"a.conf": "a=1", "b.conf": "b=1"}
B_CHANGED = {"a.conf": "a=1", "b.conf": "b=2"}
NEWER = {"a.conf": "a=3", "b.conf": "b=2"}


def spec(config: dict[str, str]) -> dict[str, object]:
    return a_spec(config=config, configInterrupts={"b.conf": {"type": "service", "services": ["b"]}})


def installed_node(exits: dict[str, list[int]]) -> FakeNode:
    entry = PackageNodeState(version="1.0.0", image="registry.local/pkg:1.0.0", stage=Stage.CONFIG,
                             state=State.COMPLETE, action=PlanAction.INSTALL, config=config_hashes(FIRST))
    return FakeNode(name=f"node-{uuid.uuid4().hex[:8]}", exits=exits,
                    state_annotation=dump_node_state(NodeState(packages={"p": entry})))


@pytest.mark.parametrize(
    ("second", "modes_after_retry"),
    [
        pytest.param(None, ["interrupt:service", "post-interrupt", "post-interrupt-check"], id="retry-same-config"),
        pytest.param(NEWER, ["config", "config-check", "interrupt:service", "post-interrupt", "post-interrupt-check"],
                     id="newer-config-runs-config-again"),
    ],
)
async def test_config_change_stopped_at_its_interrupt(
    temporal_test_env: WorkflowEnvironment, second: dict[str, str] | None, modes_after_retry: list[str],
) -> None:
    async with harness(temporal_test_env, installed_node({"interrupt": [1, 1, 1]})) as h:
        await h.request("p", spec(B_CHANGED))
        [first] = await h.results(1)
        assert (first.state, first.stage) == ("erroring", "interrupt")
        # The window started by recording what it applies; it stopped with the old hashes recorded.
        started, _ = parse_node_state(h.node.writes[0].state_annotation)
        assert started.packages["p"].target_config == config_hashes(B_CHANGED)
        stopped, _ = parse_node_state(h.node.state_annotation)
        entry = stopped.packages["p"]
        assert (entry.action, entry.stage, entry.state) == ("config", "interrupt", "erroring")
        assert (entry.config, entry.target_config) == (config_hashes(FIRST), config_hashes(B_CHANGED))
        ran_before = len(h.node.modes())
        # The fleet's `retry` asks again with the same spec; a newer config comes with a new generation.
        await h.request("p", spec(second or B_CHANGED), generation=2 if second else 1)
        [_, done] = await h.results(2)
        assert done.state == "complete", done
        assert h.node.modes()[ran_before:] == modes_after_retry
        final, _ = parse_node_state(h.node.state_annotation)
        entry = final.packages["p"]
        assert (entry.stage, entry.state, entry.target_config) == ("post-interrupt", "complete", None)
        assert entry.config == config_hashes(second or B_CHANGED)
