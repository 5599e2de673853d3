"""The retired per-Package engine (ADR 0013), on the real stack: Temporal dev server and kube-apiserver.

Runs of the old engine are left in a namespace of their own, as an upgrade would find them: a
`package/<name>` rollout and a `budget/<policy>/<compartment>` workflow (their types, with no worker
of theirs: this release cannot run them), a node workflow in a window (phase `Running`) and one the
old engine held open (phase `Erroring`); and Nodes that noderoll cordoned. Then:

* `noderoll worker` and `noderoll bridge` refuse to start, naming the open runs and the command;
* `noderoll migrate --finish-legacy` waits while a node window is in flight (nothing terminated yet),
  then terminates the runs and the held node workflow, uncordons the node noderoll cordoned whose
  record is fine, names the one left cordoned on purpose (an erroring package), and leaves a node
  cordoned by someone else alone;
* afterwards the worker starts.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

from api.keys import CORDONED_BY_ANNOTATION, CORDONED_BY_VALUE, NODE_STATE_ANNOTATION
from localstack.state import StackInfo
from protocol import names
from service.legacy_engine import open_legacy_runs
from service.temporal_client import connect
from tests.helpers import assert_eventually_async, unique_name
from tests.helpers.kube import FakeNode, create_ready_node, delete_node
from tests.helpers.processes import noderoll_processes
from tests.workflows.node_harness import register_search_attributes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PHASE = SearchAttributeKey.for_keyword(names.SEARCH_ATTR_PHASE)
COMPLETE = '{"packages":{"p":{"version":"1.0.0","image":"x/p:1.0.0","stage":"config","state":"complete"}}}'
ERRORING = '{"packages":{"p":{"version":"1.0.0","image":"x/p:1.0.0","stage":"interrupt","state":"erroring"}}}'


@pytest.fixture
async def namespace(local_stack: StackInfo, temporal_client: Client) -> AsyncIterator[Client]:
    """A Temporal namespace of its own (a worker of another test must not see the old engine's runs)."""
    name = unique_name("legacy")
    await temporal_client.workflow_service.register_namespace(RegisterNamespaceRequest(
        namespace=name, workflow_execution_retention_period=Duration(seconds=86400)))

    async def usable() -> Client:
        ns_client = await connect(local_stack.temporal_address, name)
        await register_search_attributes(ns_client)
        [_ async for _ in ns_client.list_workflows(f"{names.SEARCH_ATTR_PHASE} = 'x'")]
        return ns_client

    yield await assert_eventually_async(usable, timeout=60, retry_on=(RPCError, AssertionError))


def cordoned_node(core: client.CoreV1Api, name: str, by: str, state: str) -> None:
    create_ready_node(core, FakeNode(name))
    annotations = {NODE_STATE_ANNOTATION: state, **({CORDONED_BY_ANNOTATION: by} if by else {})}
    core.patch_node(name, {"metadata": {"annotations": annotations}, "spec": {"unschedulable": True}})


def noderoll(stack: StackInfo, namespace: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv, "--temporal-address", stack.temporal_address,
         "--temporal-namespace", namespace, "--kubeconfig", str(stack.kubeconfig)],
        capture_output=True, text=True, timeout=timeout)


async def start_old_runs(ns: Client, suffix: str) -> dict[str, str]:
    """The old engine's open runs (no worker polls their queue, so they stay open)."""
    queue = f"old-release-{suffix}"
    ids = {"rollout": f"package/p-{suffix}", "budget": f"budget/pol-{suffix}/default",
           "window": f"node/busy-{suffix}", "held": f"node/held-{suffix}"}
    await ns.start_workflow("RolloutWorkflow", {"package": f"p-{suffix}"}, id=ids["rollout"], task_queue=queue)
    await ns.start_workflow("BudgetWorkflow", {}, id=ids["budget"], task_queue=queue)
    for key, phase in (("window", "Running"), ("held", "Erroring")):
        await ns.start_workflow(names.NODE_WORKFLOW_TYPE, {"node": ids[key].removeprefix("node/")}, id=ids[key],
                                task_queue=queue, search_attributes=TypedSearchAttributes([SearchAttributePair(PHASE, phase)]))
    return ids


async def status(ns: Client, workflow_id: str) -> WorkflowExecutionStatus | None:
    return (await ns.get_workflow_handle(workflow_id).describe()).status


async def test_the_old_engine_blocks_the_start_until_migrate_finishes_it(
    namespace: Client, local_stack: StackInfo, kube_api_client: ApiClient, tmp_path: Path,
) -> None:
    ns, core = namespace, client.CoreV1Api(kube_api_client)
    suffix = unique_name("u")
    ok, err, other = f"{suffix}-ok", f"{suffix}-err", f"{suffix}-other"
    cordoned_node(core, ok, CORDONED_BY_VALUE, COMPLETE)
    cordoned_node(core, err, CORDONED_BY_VALUE, ERRORING)
    cordoned_node(core, other, "", COMPLETE)
    try:
        ids = await start_old_runs(ns, suffix)

        async def listed() -> bool:
            assert {r.workflow_id for r in await open_legacy_runs(ns)} == {ids["rollout"], ids["budget"]}
            return True

        await assert_eventually_async(listed, timeout=30)  # visibility is eventually consistent
        for process in ("worker", "bridge"):
            refused = noderoll(local_stack, ns.namespace, process)
            assert refused.returncode != 0, (process, refused.stdout, refused.stderr[-2000:])
            assert f"noderoll {process}: refusing to start" in refused.stderr, refused.stderr[-2000:]
            assert ids["rollout"] in refused.stderr and ids["budget"] in refused.stderr
            assert "noderoll migrate --finish-legacy" in refused.stderr

        command = [sys.executable, "-m", "cli", "migrate", "--finish-legacy", "--poll-seconds", "1",
                   "--timeout", "120", "--temporal-address", local_stack.temporal_address,
                   "--temporal-namespace", ns.namespace, "--kubeconfig", str(local_stack.kubeconfig)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as migrate:
            assert migrate.stdout is not None
            seen = []
            for line in migrate.stdout:
                seen.append(line)
                if line.startswith("waiting for 1 node window(s) in flight"):
                    break
            assert ids["window"] in seen[-1], seen
            # While the window is in flight nothing is terminated (the old worker would finish it).
            time.sleep(3)
            assert await status(ns, ids["rollout"]) == WorkflowExecutionStatus.RUNNING
            assert await status(ns, ids["held"]) == WorkflowExecutionStatus.RUNNING
            await ns.get_workflow_handle(ids["window"]).terminate("the old worker finished this window")
            rest, _ = migrate.communicate(timeout=120)
            output = "".join(seen) + rest
        assert migrate.returncode == 0, output
        for key in ("rollout", "budget", "held"):
            assert await status(ns, ids[key]) == WorkflowExecutionStatus.TERMINATED, (key, output)
            assert f"terminated {ids[key]}" in output
        assert f"halted {ids['rollout']}" in output
        assert f"uncordoned {ok}" in output and f"left cordoned on purpose: {err} (erroring: p)" in output
        node_ok = core.read_node(ok)
        assert not node_ok.spec.unschedulable and CORDONED_BY_ANNOTATION not in (node_ok.metadata.annotations or {})
        assert core.read_node(err).spec.unschedulable and core.read_node(other).spec.unschedulable

        async def none_open() -> bool:
            assert await open_legacy_runs(ns) == []
            return True

        await assert_eventually_async(none_open, timeout=30)
        again = noderoll(local_stack, ns.namespace, "migrate", "--finish-legacy")
        assert again.returncode == 0 and "nothing to finish" in again.stdout, again
        # The worker starts now: it runs until stopped (it would have exited at once when refusing).
        with noderoll_processes(local_stack, tmp_path, bridge=False, namespace=ns.namespace) as procs:
            procs.wait_log("worker", "worker on")
    finally:
        for name in (ok, err, other):
            delete_node(core, name)

