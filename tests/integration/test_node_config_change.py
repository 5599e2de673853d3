"""Config-only changes on the real stack (issue #12, item 1): every new desired config runs the config stage.

The node workflow is driven directly, as in test_node_window.py: install, then two config changes
of one Package whose `configInterrupts` match only one of its keys.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client

from activities.stage_pod import METADATA_PREFIX
from api.node_state import config_hashes
from tests.helpers import assert_eventually_async
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SCRIPT_IMAGE, package_spec
from tests.integration.node_window_support import Window, close_workflows, in_process_worker, record_history
from tests.workflows.node_harness import Answer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
B_INTERRUPT = {"type": "service", "services": ["noderoll-script"]}


@pytest.fixture
async def window(temporal_client: Client, kube_api_client: Any, local_stack: Any) -> AsyncIterator[Window]:
    with running_fleet(local_stack, nodes=1) as fleet:
        w = Window(temporal_client, kube_api_client, fleet.node_names[0])
        await w.start_collector()
        yield w
        w.close()
        assert w.collector is not None
        await close_workflows(temporal_client, [f"node/{w.node}", w.collector.id])


def spec_with(config: dict[str, str]) -> dict[str, Any]:
    # b.conf alone has a config interrupt; the package has none of its own.
    return package_spec(SCRIPT_IMAGE, config=config, configInterrupts={"b.conf": B_INTERRUPT})


async def run_request(w: Window, config: dict[str, str], answered: int) -> Answer:
    """Request the package with `config` and wait for the node's answer number `answered`."""
    await w.request("script-config", spec_with(config))

    async def answer() -> Answer:
        got = await w.results()
        assert len(got) >= answered, got
        return got[answered - 1]

    return await assert_eventually_async(answer, timeout=90)


def config_job_data(w: Window) -> list[dict[str, str]]:
    """The config handed to each stage pod of the node that ran `config` (its ConfigMap, recorded: the
    window deletes it at its end; the node's metadata left out), in a stable order (creation timestamps
    have a 1 s resolution, too coarse to order windows that follow quickly)."""
    jobs = [j for j in w.stage_pods()
            if any(c.name == "config" for c in [*(j.spec.init_containers or []),
                                                 *j.spec.containers])]
    maps = [w.config_map(j.metadata.name) for j in jobs]
    data = [{k: v for k, v in (m.data or {}).items() if not k.startswith(METADATA_PREFIX)} for m in maps if m]
    return sorted(data, key=lambda d: sorted(d.items()))


async def test_config_change_after_a_finished_config_change_runs_the_config_stage(
    window: Window, local_stack: Any,
) -> None:
    first = {"a.conf": "a=1\n", "b.conf": "b=1\n"}
    a_changed = {"a.conf": "a=2\n", "b.conf": "b=1\n"}
    b_changed = {"a.conf": "a=2\n", "b.conf": "b=2\n"}
    async with in_process_worker(window.temporal, local_stack.kubeconfig, window.task_queue):
        installed = await run_request(window, first, 1)
        assert installed.state == "complete", installed
        after_a = await run_request(window, a_changed, 2)
        assert after_a.state == "complete", after_a
        # a.conf matches no configInterrupt: config (+ its check) only. One pod per window for the
        # stages before the interrupt (issue #14): the install's pod runs apply, then config.
        assert window.pod_modes() == ["apply", "config"]
        entry = window.state().packages["script-config"]
        assert (entry.action, entry.stage, entry.state) == ("config", "config", "complete")
        after_b = await run_request(window, b_changed, 3)
        assert after_b.state == "complete", after_b
    # The b.conf change ran its config stage (with b.conf's new content), then the interrupt of b.conf.
    # One pod per window phase (ADR 0016): config, then the interrupt in its own pod, then post-interrupt.
    assert window.pod_modes() == ["apply", "config", "config", "interrupt", "post-interrupt"]
    assert window.modes_run().count("interrupt") == 1
    assert config_job_data(window) == sorted([first, a_changed, b_changed], key=lambda d: sorted(d.items()))
    entry = window.state().packages["script-config"]
    assert entry.config == config_hashes(b_changed)
    assert (entry.action, entry.stage, entry.state) == ("config", "post-interrupt", "complete")
    await record_history(window.temporal, window.node, "window-config-change-runs-config-short-calls-local")
