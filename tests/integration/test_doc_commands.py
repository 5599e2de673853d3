"""The docs' rollout commands, run as they stand against a live rollout (issue #24, item 1).

The convention (tests/helpers/doc_commands.py; docs/testing.md, "Docs that are tested"):

* A fenced block whose info string carries `doc-test` (```` ```sh doc-test ````) is extracted from the
  doc and run line by line, through `bash -o pipefail`, in document order: README.md, then each file
  of DOCS. One carrying `illustrative` is not run. Neither marker: the block must hold no rollout
  command (every `kubectl ...`, every `temporal workflow ...`, and every `noderoll ...` whose
  sub-command is one the ops and node command modules register), or the static test below fails,
  naming it. So a new command in the docs is tested or says it is not.
* Placeholders: the docs speak the names of `scripts/noderoll demo --keep` with its faults file, and
  the test replaces them, as whole words, with its own: `gpu-fleet` -> its DeploymentPolicy (fleet
  `fleet/<policy>`), `sysctl-tuning` and `kmod-blocklist` -> its two Packages (the demo's examples),
  `demo-003` -> the node whose kmod-blocklist `apply` fails on every attempt (the last node of the
  fleet's own order, so never the canary). Nothing else is replaced.
* The rollout: the demo's objects (a unique suffix) on 6 simulated nodes, worker, bridge and fleet
  started by the demo's own launcher on the session stack; the policy never halts on failures. The
  commands run once it has settled (every node complete but the failing one, erroring), and before
  each block the fleet settles again (nothing waiting or in progress), so a block's `retry` has run
  its windows before the next block reads logs or states.
* A command fails the test when it exits non-zero (or outlives COMMAND_TIMEOUT), when a signal it sends
  (`temporal workflow signal`, `noderoll pause|resume|halt|retry|rerun`) targets a workflow that is
  not Running before it or after it (describe), when the fleet is no longer Running after it, or when a
  `temporal workflow list` it runs lists no workflow (a documented search must find the rollout).
  Every problem is collected and reported together.

`test_the_checks_catch_the_old_temporal_ui_advice` is the negative control: the former README told
users to signal `retry` on `node/<node>` and to search `WorkflowType = "NodeWorkflow" AND
NoderollPhase = "Erroring"`; node workflows of fleet rollouts complete after each window, so both
must be caught.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client as k8s
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from api.enums import RolloutPhase, State
from cli.main import build_parser
from demo import processes as procs
from demo.resources import DemoNames, DemoTuning, demo_objects
from fleetsim.nodes import node_name
from localstack.state import StackInfo
from planning.fleet.codec import progress_from_json
from planning.rollout.compartments import stable_order
from protocol import names
from protocol.node_settings import RETRY_BACKOFF_ENV, STAGE_ATTEMPTS_ENV
from service.temporal_client import connect
from tests.helpers import assert_eventually_async, new_task_queue, unique_name
from tests.helpers.doc_commands import doc_test_commands, segments, unmarked
from tests.helpers.progress import EVERY_NODE

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / d for d in ("README.md", "docs/getting-started.md", "docs/how-it-works.md", "docs/operations.md",
                           "docs/testing.md", "docs/migration-from-nodewright.md")]
ROLLOUT_MODULES = ("cli.ops_commands", "cli.node_commands", "cli.migrate_command", "cli.plan_command",
                   "cli.report_command")
SIGNAL_VERBS = {names.SIGNAL_PAUSE, names.SIGNAL_RESUME, names.SIGNAL_HALT, names.SIGNAL_RETRY, names.SIGNAL_RERUN}
NODES = 6
COMMAND_TIMEOUT = 300
SETTLE_TIMEOUT = 420.0
ALWAYS_FAILS = 1_000_000
WORKFLOW_ID = re.compile(r"\b(?:fleet|node)/\S+")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]


def rollout_verbs() -> set[str]:
    """The `noderoll` sub-commands that act on a rollout: those the ops and node command modules register."""
    parser = build_parser(ROLLOUT_MODULES)
    return {name for action in parser._subparsers._group_actions for name in action.choices}


def test_every_rollout_command_in_the_docs_is_tested_or_illustrative() -> None:
    problems = unmarked(DOCS, ROOT, rollout_verbs())
    assert not problems, "mark these blocks `doc-test` or `illustrative`:\n" + "\n".join(problems)
    tested = doc_test_commands(DOCS, ROOT)
    # The README and the operations guide each run commands of every kind here.
    for doc in ("README.md", "docs/operations.md"):
        mine = " ".join(c.text for c in tested if c.doc == doc)
        assert "noderoll " in mine and "temporal workflow " in mine and "kubectl " in mine, doc


@dataclass
class Rollout:
    """The module's live rollout: the docs' placeholders and their values, and how to reach it."""

    placeholders: dict[str, str]
    policy: str
    packages: list[str]
    failing: str
    env: dict[str, str]
    temporal_address: str

    def substitute(self, text: str) -> str:
        """`text` with each placeholder, as a whole word, replaced by the test's name."""
        for placeholder, value in self.placeholders.items():
            text = re.sub(rf"(?<![\w.-]){re.escape(placeholder)}(?![\w-])", value, text)
        return text


@pytest.fixture(scope="module")
def rollout(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rollout]:
    """The demo's objects on NODES simulated nodes; kmod-blocklist's apply fails for good on one node."""
    from kubernetes import config as k8s_config

    demo = DemoNames("-" + unique_name("doc").split("-")[-1])
    run_dir = tmp_path_factory.mktemp("doc-commands")
    objects = demo_objects(demo, DemoTuning(soak_seconds=1))
    never_halt = {"type": "exponential", "initialBatch": 1, "growthFactor": 2, "batchThreshold": 100,
                  "failureThreshold": 10, "safetyLimit": 0}
    objects.policy["spec"] = {"canary": {"count": 1, "soakSeconds": 1, "promotion": "auto"},
                              "default": {"budget": {"count": 3}, "strategy": never_halt}}
    policy = objects.policy["metadata"]["name"]
    all_nodes = [node_name(demo.node_prefix, i, NODES) for i in range(NODES)]
    failing = stable_order(all_nodes, names.fleet_workflow_id(policy))[-1]
    kmod, sysctl = demo.named("kmod-blocklist"), demo.named("sysctl-tuning")
    assert sorted(objects.package_names) == sorted([kmod, sysctl])
    faults = run_dir / "faults.yaml"
    faults.write_text(json.dumps({"faults": [{"kind": "fail-stage", "nodes": failing, "mode": "apply",
                                              "package": kmod, "exitCode": 7, "times": ALWAYS_FAILS}]}))
    launch = procs.DemoLaunch(local_stack, demo, NODES, new_task_queue(), faults)
    record = procs.DemoRecord(local_stack.state_dir, str(run_dir), False, demo.suffix, objects.package_names,
                              policy, launch.task_queue)
    api = k8s_config.new_client_from_config(config_file=local_stack.kubeconfig)
    try:
        # Three attempts 1 s and 2 s apart: a failed window (and each retry of it) ends quickly.
        with pytest.MonkeyPatch.context() as env:
            env.setenv(STAGE_ATTEMPTS_ENV, "3")
            env.setenv(RETRY_BACKOFF_ENV, "1")
            procs.start_processes(launch, record)
        procs.wait_for_fleet(k8s.CoreV1Api(api), launch, record)
        procs.apply_objects(k8s.CustomObjectsApi(api), objects)
        bin_dir = str(Path(sys.executable).parent)
        command_env = {
            **os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(local_stack.kubeconfig), "TEMPORAL_ADDRESS": local_stack.temporal_address,
            "NODEROLL_TEMPORAL_ADDRESS": local_stack.temporal_address, "NODEROLL_STATE_DIR": str(local_stack.state_dir),
            "NODEROLL_TASK_QUEUE": launch.task_queue, "NODEROLL_SANDBOX_DIR": record.sandbox_dir,
        }
        placeholders = {"gpu-fleet": policy, "kmod-blocklist": kmod, "sysctl-tuning": sysctl, "demo-003": failing}
        yield Rollout(placeholders, policy, objects.package_names, failing, command_env, local_stack.temporal_address)
    finally:
        procs.stop_processes(record)
        procs.delete_objects(api, record)
        api.close()
        asyncio.run(_terminate(local_stack, record, all_nodes))


async def _terminate(stack: StackInfo, record: procs.DemoRecord, nodes: list[str]) -> None:
    temporal = await connect(stack.temporal_address)
    await procs.terminate_workflows(temporal, record, nodes)


async def settled(temporal: Client, rollout: Rollout) -> None:
    """Until nothing waits or runs: every node complete but the failing one, erroring for kmod-blocklist."""

    async def check() -> bool:
        handle = temporal.get_workflow_handle(names.fleet_workflow_id(rollout.policy))
        try:
            report = progress_from_json(await handle.query(names.QUERY_PROGRESS, EVERY_NODE))
        except RPCError as err:
            raise AssertionError(f"fleet/{rollout.policy} does not answer yet: {err}") from err
        assert report.phase not in (RolloutPhase.PENDING, RolloutPhase.CANARY, RolloutPhase.PROGRESSING), report.phase
        assert set(report.counts) <= {State.COMPLETE.value, State.ERRORING.value}, report.counts
        assert report.counts == {State.COMPLETE.value: NODES - 1, State.ERRORING.value: 1}, report.counts
        kmod = report.packages[rollout.placeholders["kmod-blocklist"]]
        assert list(kmod.erroring) == [rollout.failing], kmod.erroring
        return True

    await assert_eventually_async(check, timeout=SETTLE_TIMEOUT, interval=1.0)


async def running_run(temporal: Client, workflow_id: str) -> str | None:
    """The run id of `workflow_id` when its latest run is Running, else None."""
    try:
        described = await temporal.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return None
    return described.run_id if described.status == WorkflowExecutionStatus.RUNNING else None


def signal_targets(text: str, rollout: Rollout) -> list[str]:
    """The workflow ids the signals of a command line go to (None of a Package the test does not know)."""
    targets = []
    parser = build_parser(ROLLOUT_MODULES)
    for seg in segments(text):
        program = Path(seg[0]).name
        if program == "temporal" and seg[1:3] == ["workflow", "signal"]:
            for flag in ("--workflow-id", "-w"):
                if flag in seg:
                    targets.append(seg[seg.index(flag) + 1])
        elif program == "noderoll" and len(seg) > 1 and seg[1] in SIGNAL_VERBS:
            try:
                args = parser.parse_args(seg[1:])
            except SystemExit:  # a usage error: the command itself fails with exit 2
                continue
            fleet = getattr(args, "fleet", None) or (rollout.policy if args.package in rollout.packages else None)
            targets.append(names.fleet_workflow_id(fleet) if fleet else f"<fleet of unknown Package {args.package}>")
    return targets


async def run_checked(temporal: Client, rollout: Rollout, where: str, text: str) -> list[str]:
    """Run one command line as the docs give it (placeholders replaced); the problems it shows."""
    command = rollout.substitute(text)
    fleet_id = names.fleet_workflow_id(rollout.policy)
    targets = signal_targets(command, rollout)
    before = {t: await running_run(temporal, t) for t in targets}
    problems = [f"{where}: `{command}`: signal to {t}, which is not running (closed or unknown)"
                for t, run in before.items() if run is None]
    try:
        result = subprocess.run(["bash", "-o", "pipefail", "-c", command], env=rollout.env, cwd=ROOT,
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        return [*problems, f"{where}: `{command}`: still running after {COMMAND_TIMEOUT} s"]
    if result.returncode != 0:
        problems.append(f"{where}: `{command}`: exit {result.returncode}\n{result.stdout[-1500:]}{result.stderr[-1500:]}")
    for target, run in before.items():
        after = await running_run(temporal, target)
        if run is not None and after != run:
            problems.append(f"{where}: `{command}`: {target} is no longer the running run {run} after it")
    if await running_run(temporal, fleet_id) is None:
        problems.append(f"{where}: `{command}`: {fleet_id} is not running after it")
    lists = any(Path(seg[0]).name == "temporal" and seg[1:3] == ["workflow", "list"] for seg in segments(command))
    if lists and not WORKFLOW_ID.search(result.stdout):
        problems.append(f"{where}: `{command}`: the search lists no workflow\n{result.stdout[-800:]}")
    return problems


async def test_the_docs_commands_run_against_a_live_rollout(rollout: Rollout, temporal_client: Client) -> None:
    commands = doc_test_commands(DOCS, ROOT)
    assert commands, "no doc-test block found"
    problems: list[str] = []
    ran: list[str] = []
    block = None
    for command in commands:
        if command.block is not block:
            block = command.block
            await settled(temporal_client, rollout)
        problems += await run_checked(temporal_client, rollout, command.where, command.text)
        ran.append(command.where)
    print(f"ran {len(ran)} commands of {len({c.block for c in commands})} doc-test blocks: {', '.join(ran)}")
    assert not problems, "\n\n".join(problems)


async def test_the_checks_catch_the_old_temporal_ui_advice(rollout: Rollout, temporal_client: Client) -> None:
    await settled(temporal_client, rollout)
    where = "README.md before issue #24"
    # Its "From the Temporal UI" advice, for the failing node (the search narrowed to it: the shared
    # stack may hold other tests' per-Package node workflows, which do use the phase Erroring).
    signal = await run_checked(temporal_client, rollout, where,
                               f"temporal workflow signal --workflow-id node/{rollout.failing} --name retry")
    search = await run_checked(temporal_client, rollout, where,
                               "temporal workflow list --query 'WorkflowType = \"NodeWorkflow\" AND "
                               f"NoderollPhase = \"Erroring\" AND NoderollNode = \"{rollout.failing}\"'")
    assert any("not running" in p for p in signal), signal
    assert any("lists no workflow" in p for p in search), search
