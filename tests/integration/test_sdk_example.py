"""examples/sdk_control.py, run as a user runs it, against a live fleet on the local stack.

The fleet's canary waits for manual promotion, so when the example runs nothing is in flight and
the other nodes wait: a paused Package must show `Paused` in `progress`. The example pauses the
Package (signal `pause`, typed `Filter`), waits until the typed `progress` shows it, prints, and
resumes it. Checked from outside: its exit code and lines, the two signals with their filter in the
fleet's history, the Package no longer paused afterwards (back to the fleet's `Canary`); then the
canary is promoted (`resume` without a filter, as an operator does) and the rollout completes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes.client import ApiClient
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from api.enums import CanaryPhase, RolloutPhase
from localstack.state import StackInfo
from protocol import names
from tests.helpers import assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SYSCTL_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
)

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdk_control.py"
NODES = 3
TIMEOUT = 240.0


run = noderoll_fixture()


async def signals_to(temporal: Client, workflow_id: str) -> list[tuple[str, object]]:
    """(name, payload) of every signal in the workflow's history, in order."""
    found = []
    async for event in temporal.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            payloads = [json.loads(p.data) for p in attrs.input.payloads]
            found.append((attrs.signal_name, payloads[0] if payloads else None))
    return found


async def test_the_sdk_example_pauses_one_package_and_resumes_it(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client
) -> None:
    labels = {"sdk-test": unique_name("sdk")}
    policy, package = unique_name("pol"), unique_name("sdk")
    fleet_id = names.fleet_workflow_id(policy)
    with running_fleet(local_stack, nodes=NODES, labels=labels):
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1, "soakSeconds": 1, "promotion": "manual"},
                "default": {"budget": {"count": 2}}})
            create_package(kube_api_client, run.package(package, package_spec(
                SYSCTL_IMAGE, policy=policy, labels=labels, config={"sysctl.conf": "vm.max_map_count = 262144\n"})))

            async def awaiting_promotion() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.canary_phase is CanaryPhase.AWAITING_PROMOTION, (report.phase, report.canary_phase)
                assert report.packages[package].counts == {"complete": 1, "waiting": NODES - 1}, report.packages
                return True

            await assert_eventually_async(awaiting_promotion, timeout=TIMEOUT)
            result = subprocess.run(
                [sys.executable, str(EXAMPLE), "--temporal-address", local_stack.temporal_address,
                 "--policy", policy, "--package", package, "--wait-seconds", "60"],
                capture_output=True, text=True, timeout=180)
            assert result.returncode == 0, (result.stdout, result.stderr)
            paused_line = next(line for line in result.stdout.splitlines() if line.startswith("paused:"))
            assert f"fleet/{policy}" in paused_line, result.stdout
            assert f"{package} 1.0.0: Paused" in result.stdout, result.stdout
            # The signals went to the fleet, each with the Package filter (protocol.fleet.Filter's JSON).
            sent = [(n, p) for n, p in await signals_to(temporal_client, fleet_id)
                    if n in (names.SIGNAL_PAUSE, names.SIGNAL_RESUME)]
            only = {"packages": [package], "nodes": []}
            assert sent == [(names.SIGNAL_PAUSE, only), (names.SIGNAL_RESUME, only)], sent
            # Resumed: the Package is held by the canary's promotion again, no longer by the pause.
            report = await fleet_progress(temporal_client, policy)
            assert report.packages[package].phase is RolloutPhase.CANARY, report.packages[package]

            await temporal_client.get_workflow_handle(fleet_id).signal(names.SIGNAL_RESUME)

            async def complete() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.phase is RolloutPhase.COMPLETE, (report.phase, report.message)
                assert report.packages[package].counts == {"complete": NODES}, report.packages[package]
                return True

            await assert_eventually_async(complete, timeout=TIMEOUT)
        finally:
            delete_package(kube_api_client, package)
            delete_policy(kube_api_client, policy)
