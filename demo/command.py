"""`noderoll demo`: the whole system on this machine, one fleet rollout watched live, then a summary. Does I/O.

Steps: bring up the local stack (`localstack`, reused when it already runs), start `noderoll worker`,
`noderoll bridge` and `noderoll sim` (a fleet of `--nodes` simulated GPU nodes in 3 zones, with
training pods, protected pods and Deployments under PDBs), apply the example DeploymentPolicy
(canary, then exponential batches) and two example Packages (one needs a reboot and depends on the
other): both roll out as one fleet, `fleet/<policy>`, one window per node (one drain, one reboot).
It shows the fleet live (`demo.view`) until every Package is Complete, prints a summary
(`demo.summary`: each Package, the fleet, disruptions per node from the fleet and from the
nodes themselves) and where to look. Without `--keep` it stops what it started (the stack only when
it started it, and then deletes the stack's data: the next run starts fresh). Exit codes: 0 every Package Complete, 1 a Package failed or halted, 2 set-up
failed, 3 timeout, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from api.enums import RolloutPhase, State
from cli.ops_client import Ops, OpsTarget, is_finished
from cli.ops_fleets import fleet_view
from cli.report_command import write_report
from demo import gates
from demo import processes as procs
from demo.resources import DemoNames, DemoObjects, DemoTuning, demo_objects, gpu_watch, interrupt_word
from demo.summary import NodeEvidence, Outcome, fleet_summary, packages_summary
from demo.view import LiveSnapshot, change_lines, observe, render_live
from fleetsim.nodes import node_name
from localstack.provision import ProvisionError
from localstack.state import StackInfo, default_state_dir, load_stack_info
from planning.views.fleet_status import NODES_PAGE_MAX
from planning.views.status import RolloutProgress
from protocol import names
from protocol.fleet import ProgressFilter

# One fleet queried every poll: fast enough to watch, light on a busy workflow's query buffer.
POLL_SECONDS = 1.5
# A snapshot that takes longer (a workflow failing its tasks answers no query) is skipped.
SNAPSHOT_TIMEOUT = 20.0
BAD_PHASES = {RolloutPhase.FAILED, RolloutPhase.HALTED, RolloutPhase.INVALID, RolloutPhase.ROLLED_BACK}
EXIT_FAILED, EXIT_SETUP, EXIT_TIMEOUT = 1, 2, 3


def register(subparsers: Any) -> None:
    """Add `noderoll demo`."""
    p = subparsers.add_parser("demo", help="run the whole system locally and watch a rollout (start here)",
                              description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=24, help="simulated nodes, spread over 3 zones (default 24)")
    p.add_argument("--faults", type=Path, help="fleetsim faults file (YAML/JSON), e.g. a stage that fails")
    p.add_argument("--state-dir", help="local stack state dir, as for `dev up` (default $NODEROLL_STATE_DIR or .noderoll/)")
    p.add_argument("--keep", action="store_true", help="leave stack, worker, bridge and fleet running afterwards")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds (default 900)")
    p.add_argument("--task-queue", default=names.DEFAULT_TASK_QUEUE, help="task queue of the demo worker")
    p.add_argument("--name-suffix", default="", help="suffix for every demo object name (several demos per cluster)")
    p.add_argument("--soak-seconds", type=int, default=10, help="canary soak of the demo policy (default 10)")
    p.add_argument("--budget-percent", type=int, help="override the policy's default budget percent")
    p.add_argument("--plain", action="store_true", help="one line per change instead of the live display")
    p.add_argument("--stop", action="store_true", help="stop what an earlier `demo --keep` left running, and exit")
    gates.add_arguments(p)
    p.set_defaults(func=run)


def _say(console: Console, message: str) -> None:
    console.print(f"[bold blue]demo[/]: {message}", highlight=False)


def run(args: argparse.Namespace) -> int:
    """Entry point of `noderoll demo`."""
    # Piped (CI, tests): wide enough that every table row stays on one line.
    console = Console(width=None if sys.stdout.isatty() else 200)
    state_dir = Path(args.state_dir).resolve() if args.state_dir else default_state_dir()
    if args.stop:
        return _stop_recorded(console, state_dir)
    previous = load_stack_info(state_dir)
    started_stack = not (previous is not None and previous.is_running())
    kept = procs.DemoRecord.load(state_dir / "demo")
    if kept is not None:
        # An earlier `demo --keep`: replace its processes, and inherit whether the stack is the demo's.
        _say(console, f"stopping {procs.stop_processes(kept)} process(es) an earlier `demo --keep` left running")
        started_stack = started_stack or kept.started_stack
    names = DemoNames(args.name_suffix)
    objects = demo_objects(names, DemoTuning(args.soak_seconds, args.budget_percent, args.nodes))
    record = procs.DemoRecord(str(state_dir), str(state_dir / "demo"), started_stack, names.suffix, objects.package_names,
                              objects.policy["metadata"]["name"], args.task_queue)
    outcome = Outcome(130, "interrupted")
    try:
        outcome = _run_demo(console, args, record, objects)
    except KeyboardInterrupt:
        pass  # the finally below stops what was started
    finally:
        gates.stop(args)
        if args.keep:
            _say(console, f"--keep: everything keeps running; stop it with `noderoll demo --stop --state-dir {state_dir}`")
        else:
            _cleanup(console, record)
    style = "green" if outcome.code == 0 else "red"
    console.print(f"[bold {style}]demo: {outcome.message}[/]", highlight=False)
    return outcome.code


def _run_demo(console: Console, args: argparse.Namespace, record: procs.DemoRecord, objects: DemoObjects) -> Outcome:
    from localstack.stack import StackError, up

    state_dir = Path(record.state_dir)
    _say(console, ("starting" if record.started_stack else "reusing") + f" the local stack in {state_dir}")
    try:
        stack = up(state_dir, progress=lambda line: console.print(f"  {line}", style="dim", highlight=False))
    except (ProvisionError, StackError) as err:
        return Outcome(EXIT_SETUP, f"the local stack did not start: {err}")
    try:
        objects = gates.prepare(args, objects, console, state_dir)
    except (ProvisionError, RuntimeError) as err:
        return Outcome(EXIT_SETUP, f"--gates: no Prometheus for the gate: {err}")
    launch = procs.DemoLaunch(stack, DemoNames(record.names_suffix), args.nodes, args.task_queue, args.faults)
    outcome = Outcome(EXIT_SETUP, "set-up failed")
    try:
        outcome = asyncio.run(_drive(console, args, launch, record, objects))
    except procs.DemoError as err:
        outcome = Outcome(EXIT_SETUP, str(err))
    except Exception as err:  # noqa: BLE001 - any API or Temporal error ends the demo with its message
        outcome = Outcome(EXIT_SETUP, f"{type(err).__name__}: {err}")
    finally:
        if outcome.snapshot.packages:
            evidence = _evidence(stack, outcome, record.sandbox_dir)
            console.print(packages_summary(outcome, evidence))
            console.print(fleet_summary(outcome, evidence))
        _where_to_look(console, stack, record, outcome.report)
    return outcome


async def _drive(console: Console, args: argparse.Namespace, launch: procs.DemoLaunch,
                 record: procs.DemoRecord, objects: DemoObjects) -> Outcome:
    target = OpsTarget(launch.stack.temporal_address, names.DEFAULT_NAMESPACE, launch.stack.kubeconfig, "demo")
    ops = await Ops.connect(target)
    try:
        procs.start_processes(launch, record)
        _say(console, f"worker, bridge and a fleet of {launch.nodes} nodes starting (logs in {state_logs(record)})")
        nodes = await asyncio.to_thread(procs.wait_for_fleet, ops.core, launch, record)
        created = await asyncio.to_thread(procs.start_workloads, ops.core, launch, nodes)
        _say(console, f"fleet Ready: {len(nodes)} nodes {nodes[0]}..{nodes[-1]}; workloads {created}")
        # Boot ids before anything is applied: every later one is a reboot.
        first = LiveSnapshot(record.policy, nodes=await asyncio.to_thread(ops.list_nodes, _node_selector(record)),
                             interrupt=interrupt_word(objects), gpus=gpu_watch(objects))
        observe(first)
        started = datetime.now(UTC)
        await asyncio.to_thread(procs.apply_objects, ops.custom, objects)
        _say(console, f"applied DeploymentPolicy {record.policy} and Packages {', '.join(record.packages)}: "
                      f"one rollout, {names.fleet_workflow_id(record.policy)}")
        outcome = await _watch(console, args, ops, record, first)
        outcome.started = started
        outcome.report = await _report(console, ops, record)
        return outcome
    finally:
        ops.close()


async def _report(console: Console, ops: Ops, record: procs.DemoRecord) -> str:
    """The rollout's HTML report in the demo's run folder ("" when it cannot be written)."""
    try:
        return str(await write_report(ops, record.policy, Path(record.run_dir) / "report.html"))
    except Exception as err:  # noqa: BLE001 - the demo's summary must print without its report
        console.print(f"[yellow]demo: no report: {type(err).__name__}: {err}[/]", highlight=False)
        return ""


def state_logs(record: procs.DemoRecord) -> str:
    """The folder of the demo's process logs."""
    return record.run_dir


def _node_selector(record: procs.DemoRecord) -> str:
    return f"fleetsim.noderoll.io/prefix={DemoNames(record.names_suffix).node_prefix}"


async def _snapshot(ops: Ops, record: procs.DemoRecord, snapshot: LiveSnapshot) -> LiveSnapshot:
    # The demo shows every node (a few dozen): the fleet's answer lists them when asked (issue 45).
    view = await fleet_view(ops, record.policy, record.packages, ProgressFilter(all=True, limit=NODES_PAGE_MAX))
    nodes = await asyncio.to_thread(ops.list_nodes, _node_selector(record))
    fresh = LiveSnapshot(record.policy, view.progress, {v.name: v.progress for v in view.packages}, nodes,
                         snapshot.elapsed, snapshot.interrupt, snapshot.batches, snapshot.boot_ids, snapshot.gpus)
    observe(fresh)
    return fresh


async def _watch(console: Console, args: argparse.Namespace, ops: Ops, record: procs.DemoRecord,
                 first: LiveSnapshot) -> Outcome:
    """Poll the fleet and the nodes until every Package settles, one fails, a process dies, or time runs out."""
    began = time.monotonic()
    live_mode = console.is_terminal and not args.plain
    snapshot: LiveSnapshot | None = None
    outcome = Outcome(EXIT_TIMEOUT, f"timeout: the rollout did not complete within {args.timeout:.0f}s")
    live = Live(console=console, refresh_per_second=4, transient=False) if live_mode else None
    if live is not None:
        live.start()
    try:
        while True:
            procs.check_alive(record)
            try:
                current = await asyncio.wait_for(_snapshot(ops, record, snapshot or first), SNAPSHOT_TIMEOUT)
            except TimeoutError:
                if time.monotonic() - began > args.timeout:
                    break
                console.print(f"[yellow]demo: no progress answer within {SNAPSHOT_TIMEOUT:.0f}s; see "
                              f"{record.components['worker'].log}[/]", highlight=False)
                continue
            current.elapsed = time.monotonic() - began
            if live is not None:
                live.update(render_live(current))
            else:
                for line in change_lines(snapshot, current):
                    console.print(line, highlight=False, soft_wrap=True)
            snapshot = current
            outcome.fleet = current.progress or outcome.fleet
            for package, progress in current.packages.items():
                if _settled(package, progress, current) and package not in outcome.durations:
                    outcome.durations[package] = current.elapsed
                    outcome.settled[package] = progress
            bad = {p: g for p, g in current.packages.items() if g.phase in BAD_PHASES and not gates.holding(args, g)}
            if bad:
                detail = "; ".join(f"{p} {g.phase.value}: {g.message or g.erroring}" for p, g in bad.items())
                outcome.code, outcome.message = EXIT_FAILED, f"rollout failed: {detail}"
                break
            if len(outcome.durations) == len(record.packages):
                outcome.code, outcome.message = 0, f"rollout complete in {current.elapsed:.0f}s"
                break
            if current.elapsed > args.timeout:
                break
            await asyncio.sleep(POLL_SECONDS)
    finally:
        if live is not None:
            live.stop()
    outcome.snapshot = snapshot or first
    return outcome


def _settled(package: str, progress: RolloutProgress, snapshot: LiveSnapshot) -> bool:
    """The rollout says it is done, no node's own record disagrees (none still in progress), and every
    demo node records the package: a fleet that answers "done" for nodes it never saw (the history of
    an earlier run) is not this run's rollout."""
    working = [n.name for n in snapshot.nodes
               if package in n.packages and n.packages[package].state is State.IN_PROGRESS]
    recorded = all(package in n.packages for n in snapshot.nodes)
    return is_finished(progress) and not working and recorded


def _evidence(stack: StackInfo, outcome: Outcome, sandbox_dir: str) -> NodeEvidence | None:
    """Cordon Events, interrupts recorded on the hosts and failed stage pods kept, on the demo's nodes
    (independent of the fleet's accounting)."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    nodes = {n.name for n in outcome.snapshot.nodes}
    if outcome.started is None:
        return None
    api = k8s_config.new_client_from_config(config_file=stack.kubeconfig)
    try:
        failed = procs.failed_pods(k8s.CoreV1Api(api), nodes, set(outcome.snapshot.packages), outcome.started)
        events = procs.count_cordon_events(k8s.CoreV1Api(api), nodes, outcome.started)
        interrupts = procs.count_interrupts(sandbox_dir, nodes, outcome.started)
        return NodeEvidence(events, interrupts, failed)
    except Exception as err:  # noqa: BLE001 - the summary must print even when the API is gone
        print(f"demo: could not count Events and stage pods: {err}", file=sys.stderr)
        return None
    finally:
        api.close()


def _where_to_look(console: Console, stack: StackInfo, record: procs.DemoRecord, report: str = "") -> None:
    query = urllib.parse.quote(f'WorkflowId = "{names.fleet_workflow_id(record.policy)}"')
    console.print("[bold]where to look[/]")
    console.print(f"  Temporal UI : {stack.temporal_ui}/namespaces/{names.DEFAULT_NAMESPACE}/workflows?query={query}",
                  highlight=False, soft_wrap=True)
    console.print(f"  kubeconfig  : {stack.kubeconfig}   (kubectl --kubeconfig {stack.kubeconfig} get packages)",
                  highlight=False, soft_wrap=True)
    for name, url in sorted(record.metrics.items()):
        console.print(f"  metrics     : {url}  ({name})", highlight=False)
    console.print(f"  logs        : {state_logs(record)}/{{worker,bridge,fleet}}.log", highlight=False)
    if report:
        console.print(f"  report      : {report}  (noderoll report {record.policy}: open it in a browser)",
                      highlight=False, soft_wrap=True)
    console.print(f"  CLI         : noderoll status --state-dir {stack.state_dir}; noderoll nodes --fleet "
                  f"{record.policy}; noderoll logs {record.packages[-1]} --node <node>", highlight=False,
                  soft_wrap=True)


def _cleanup(console: Console, record: procs.DemoRecord) -> None:
    """Stop what this demo started; clean its objects when the stack stays (it was running before)."""
    from localstack.stack import down

    stopped = procs.stop_processes(record)
    state_dir = Path(record.state_dir)
    if record.started_stack:
        # The stack is the demo's own: its data goes with it, so the next `noderoll demo` rolls out
        # on a fresh cluster (kept, its Temporal history showed the previous run's fleet Complete and
        # the demo reported "complete in 0s" with no node touched). The demo's logs stay.
        stopped += down(state_dir, purge=True)
        _say(console, f"stopped {stopped} process(es), including the local stack it started (its data deleted; "
                      f"logs kept in {record.run_dir})")
    else:
        stack = load_stack_info(state_dir)
        if stack is not None and stack.is_running():
            _clean_objects(stack, record)
        _say(console, f"stopped {stopped} demo process(es); the stack that was already running keeps running")
    record.forget()


def _clean_objects(stack: StackInfo, record: procs.DemoRecord) -> None:
    from kubernetes import config as k8s_config

    from service.temporal_client import connect

    size = _fleet_size(record)
    nodes = [node_name(DemoNames(record.names_suffix).node_prefix, i, size) for i in range(size)]
    api = k8s_config.new_client_from_config(config_file=stack.kubeconfig)
    try:
        procs.delete_objects(api, record)
    finally:
        api.close()

    async def terminate() -> None:
        client = await connect(stack.temporal_address)
        await procs.terminate_workflows(client, record, nodes)

    asyncio.run(terminate())


def _fleet_size(record: procs.DemoRecord) -> int:
    fleet = record.components.get("fleet")
    if fleet is None or "--nodes" not in fleet.argv:
        return 0
    return int(fleet.argv[fleet.argv.index("--nodes") + 1])


def _stop_recorded(console: Console, state_dir: Path) -> int:
    record = procs.DemoRecord.load(state_dir / "demo")
    if record is None:
        _say(console, f"no demo recorded in {state_dir}; nothing to stop")
        return 0
    _cleanup(console, record)
    return 0
