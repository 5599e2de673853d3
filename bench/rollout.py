"""One benchmark rollout on the local stack: simulated nodes, worker, bridge, Packages, measurements. Does I/O.

`run_rollout` starts `noderoll sim` (N nodes labelled for this run), `noderoll worker` and
`noderoll bridge` on a fresh task queue, applies the scenario's DeploymentPolicy and its Packages
(one fleet, `fleet/<name>`), waits for `status.phase: Complete` on every Package, then collects:
the makespan, node windows from the Temporal histories (with their drains and interrupts), the
fleet's own disruption count per node (its `progress` query), apiserver request deltas, noderoll's
own request counts and the processes' peak RSS.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.service import RPCError

from api.keys import GROUP, NODE_STATUS_LABEL, PACKAGE_PLURAL, POLICY_PLURAL, VERSION
from bench import apimetrics, cli_timing, fleet_history, histories, resources
from bench.cpu_timeline import CpuTimeline
from bench.eta import EtaSampler, eta_accuracy, extrapolated_end
from bench.procs import Connection, ProcessSet
from bench.profile import Profiles
from bench.sample import Sample, StatusSizes, halt_and_drain, run_sample
from bench.scale_probes import (
    STATUS_PROBES,
    Probes,
    ProgressSizes,
    fleet_history_counts,
    scale_figures,
    time_plan,
    time_status,
)
from bench.scenario import (
    PACKAGES_DIR,
    RUN_LABEL,
    Scenario,
    batch_sizes,
    ideal_makespan,
    node_critical_path,
    package_manifests,
    policy_manifest,
)
from bench.summary import disruptions, summarize
from planning.fleet.codec import progress_from_json
from planning.views.fleet_status import FleetProgress
from protocol.names import QUERY_PROGRESS, fleet_workflow_id
from protocol.node_settings import EAGER_START_ENV

POLL_SECONDS = 1.0
OBJECTS_SETTLE_SECONDS = 10.0
WORKER = "worker"
# The stack's processes whose CPU and memory a run reports (names as in stack.json).
STACK_CPU = ("kube-apiserver", "etcd", "temporal", "kube-controller-manager", "kube-scheduler")
FAILED_PHASES = ("Failed", "Halted", "Invalid")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """The stack the benchmark runs on, where it keeps its logs, and how many workers it starts.

    `components`: the stack's processes by name (pid), for their CPU and memory.
    """

    temporal_address: str
    kubeconfig: str
    workdir: Path
    workers: int = 1
    components: dict[str, int] = field(default_factory=dict)
    # Seconds fleetsim waits before a stage pod's containers start (`noderoll sim --pod-startup-seconds`).
    pod_startup_seconds: float = 1.0
    # py-spy on worker(s), bridge and fleetsim while the Packages roll (`noderoll bench --profile`).
    profile: bool = False
    # The machine's CPU sampled every 0.25 s, cut by batch (`noderoll bench --cpu-timeline`).
    cpu_timeline: bool = False
    # fleetsim's Lease renewal period per node (`noderoll sim --heartbeat-seconds`; issue 45: 10,000 nodes
    # renewing every 60 s are 167 writes a second, more than this machine's apiserver carries beside the run).
    sim_heartbeat_seconds: float = 60.0
    # How long `noderoll plan` of the wave may take before the bench records it as not finished.
    plan_timeout_seconds: float = cli_timing.PLAN_TIMEOUT_SECONDS
    # Minutes after the Packages' creation when the run halts its fleet and measures what ran (0: none).
    deadline_minutes: float = 0.0


class Kube:
    """The few API calls of the benchmark (Package, DeploymentPolicy, Nodes)."""

    def __init__(self, kubeconfig: str) -> None:
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def create(self, plural: str, body: dict[str, Any]) -> None:
        self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)

    def package(self, name: str) -> dict[str, Any]:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, name)

    def policy(self, name: str) -> dict[str, Any]:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, name)

    def nodes(self, run: str) -> list[client.V1Node]:
        return self.core.list_node(label_selector=f"{RUN_LABEL}={run}").items

    def nodes_json(self, run: str) -> list[dict[str, Any]]:
        """The run's Nodes as raw JSON (10,000 typed Nodes take the client seconds to build)."""
        response = self.core.list_node(label_selector=f"{RUN_LABEL}={run}", _preload_content=False)
        try:
            return json.loads(response.data).get("items") or []
        finally:
            response.release_conn()

    def remove(self, plural: str, name: str) -> None:
        """Delete a cluster object, dropping finalizers first (the benchmark's processes are gone)."""
        try:
            self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name, {"metadata": {"finalizers": None}})
            self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise


def start_processes(target: Target, sc: Scenario, procs: ProcessSet, task_queue: str) -> None:
    """Fleet first (nodes Ready), then worker and bridge."""
    budget = sc.budget_count or max(1, sc.nodes * sc.budget_percent // 100)
    workers = max(8, min(sc.nodes, budget) + 8)
    procs.start_fleet(
        ["--nodes", str(sc.nodes), "--name-prefix", sc.name, "--labels", f"{RUN_LABEL}={sc.name}",
         "--image-store", str(PACKAGES_DIR), "--reboot-seconds", f"{sc.reboot_seconds:g}",
         "--jitter-percent", f"{sc.jitter_percent:g}",
         "--max-grace-seconds", "5", "--workers", str(workers), "--delete-on-exit",
         "--pod-startup-seconds", f"{target.pod_startup_seconds:g}",
         "--heartbeat-seconds", f"{target.sim_heartbeat_seconds:g}",
         "--sandbox-dir", str(target.workdir / "sandboxes")],
        target.kubeconfig,
    )
    conn = Connection(target.temporal_address, target.kubeconfig, task_queue)
    # `--workers N`: N `noderoll worker` processes on the one task queue share the work (issue #14).
    # One worker: node runs start eagerly on it (protocol.node_settings.EAGER_START_ENV); several: shared.
    eager = {EAGER_START_ENV: "1" if target.workers <= 1 else "0"}
    for index in range(1, max(1, target.workers) + 1):
        procs.start_noderoll(WORKER if target.workers <= 1 else f"{WORKER}-{index}", ["worker"], conn, env=eager)
    # Its own leader Lease and only this run's objects: other bridges on a shared stack do not interfere.
    procs.start_noderoll("bridge", ["bridge", "--lease-name", f"bench-{task_queue}",
                                    "--label-selector", f"{RUN_LABEL}={sc.name}"], conn)


@dataclass
class Completion:
    """When every Package said Complete, and when every target node was really done."""

    status_complete: float  # monotonic
    nodes_done: float  # monotonic


# Taints the node lifecycle controller puts on a node that is not Ready yet (a node just registered has them
# for seconds; at 10,000 nodes for minutes): a run starts once none of its nodes has one.
UNSETTLED_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
SETTLE_TIMEOUT_SECONDS = 1200.0


async def settled_nodes(kube: Kube, run: str, log: Log) -> list[str]:
    """The run's nodes, once none has a not-ready or unreachable taint (the controller removes them after
    registration; a listing that saw them would find the fleet blocked and mark every node, once, then unmark
    it: a cost of registering 10,000 nodes at once, not of rolling them). Sorted names."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while True:
        items = kube.nodes_json(run)
        tainted = sum(1 for n in items if any(t.get("key") in UNSETTLED_TAINTS for t in (n.get("spec") or {}).get(
            "taints") or []))
        if not tainted or time.monotonic() > deadline:
            if tainted:
                log(f"{run}: {tainted} node(s) still tainted not-ready after {SETTLE_TIMEOUT_SECONDS:.0f} s")
            return sorted(n["metadata"]["name"] for n in items)
        log(f"{run}: {tainted} of {len(items)} node(s) still tainted not-ready; waiting")
        await asyncio.sleep(10)


def _nodes_done(kube: Kube, run: str) -> bool:
    """Every node of the run records the package complete and none is cordoned (the nodes' own view)."""
    nodes = kube.nodes(run)
    return bool(nodes) and all(
        (n.metadata.labels or {}).get(NODE_STATUS_LABEL) == "complete" and not n.spec.unschedulable for n in nodes)


@dataclass
class Watch:
    """What a run polls while it runs: its objects and processes; what it keeps: the status objects' sizes."""

    kube: Kube
    sc: Scenario
    procs: ProcessSet
    sizes: StatusSizes = field(default_factory=StatusSizes)
    # Monotonic time after which the run stops waiting: its fleet is halted and what ran is measured.
    deadline: float | None = None


async def wait_complete(watch: Watch, timeout: float, log: Log) -> Completion | None:
    """Poll the Packages until every `status.phase` is Complete, then the nodes until all are done.

    Both are recorded: a status that says Complete while a node is still in its window is a bug
    the benchmark must not hide (the makespan is until the nodes are done).
    """
    kube, sc, procs = watch.kube, watch.sc, watch.procs
    deadline = min(time.monotonic() + timeout, watch.deadline or float("inf"))
    last: dict[str, str] = {}
    complete: set[str] = set()
    said_complete: float | None = None
    while time.monotonic() < deadline:
        procs.check_alive()
        for name in sc.package_names:
            if name in complete:
                continue
            status = kube.package(name).get("status") or {}
            watch.sizes.note("Package", status)
            phase = status.get("phase", "")
            if phase in FAILED_PHASES:
                raise RuntimeError(f"Package {name} ended {phase}: {status.get('message', '')}")
            if phase == "Complete":
                complete.add(name)
            line = f"{phase or 'no status'} {status.get('progress', '')}"
            if line != last.get(name):
                log(f"  {name}: {line}")
                last[name] = line
        watch.sizes.note("DeploymentPolicy", kube.policy(sc.name).get("status"))
        if said_complete is None and len(complete) == sc.packages:
            said_complete = time.monotonic()
        if said_complete is not None and _nodes_done(kube, sc.name):
            return Completion(said_complete, time.monotonic())
        # An asyncio sleep, so Ctrl-C (task cancellation) ends the run and its processes promptly.
        await asyncio.sleep(POLL_SECONDS)
    if watch.deadline is not None:
        return None  # the run's deadline: the caller halts the fleet and measures what ran
    raise TimeoutError(f"Packages {', '.join(sc.package_names)} not Complete on every node after {timeout:.0f}s "
                       f"(last: {last})")


async def fleet_progress(temporal: Client, policy: str, sizes: ProgressSizes | None = None) -> FleetProgress | None:
    """The fleet's `progress` (None when it does not answer: its disruption counts are then not reported)."""
    try:
        raw = await temporal.get_workflow_handle(fleet_workflow_id(policy)).query(QUERY_PROGRESS, result_type=RawValue)
    except Exception as err:  # noqa: BLE001 - reported as missing, the histories still count
        if sizes is not None:
            sizes.failures += 1
            sizes.last_error = str(err)[:300]
        return None
    if sizes is not None:
        sizes.largest = max(sizes.largest, raw.payload.ByteSize())
    return progress_from_json(json.loads(raw.payload.data))


async def run_rollout(target: Target, sc: Scenario, temporal: Client, log: Log) -> dict[str, Any]:
    """Run one scenario end to end and return its result row."""
    procs = ProcessSet(target.workdir)
    kube = Kube(target.kubeconfig)
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    connection = cli_timing.connection_args(target.temporal_address, target.kubeconfig)
    try:
        log(f"{sc.name}: starting {sc.nodes} simulated nodes, worker and bridge (task queue {task_queue})")
        start_processes(target, sc, procs, task_queue)
        for name in ("kube-apiserver", "etcd"):
            if name in target.components:
                procs.external[name] = target.components[name]
        node_names = await settled_nodes(kube, sc.name, log)
        kube.create(POLICY_PLURAL, policy_manifest(sc))
        # `noderoll plan` of the whole wave, before the Packages exist (the run does not pay for it).
        plan = await asyncio.to_thread(time_plan, target.workdir, sc, connection, target.plan_timeout_seconds)
        log(f"{sc.name}: noderoll plan of the wave: {plan['seconds']} s (exit {plan['exit_code']})")
        objects_before = resources.count_objects(target.kubeconfig)
        before = apimetrics.scrape(target.kubeconfig)
        cpu_pids = _cpu_pids(target, procs)
        cpu_before = resources.snapshot(cpu_pids)
        profiles = Profiles(target.workdir, sc.name)
        if target.profile:
            for name, managed in procs.procs.items():
                profiles.attach(name, managed.proc.pid)
        timeline = CpuTimeline(cpu_pids)
        if target.cpu_timeline:
            timeline.start()
        started, started_epoch = time.monotonic(), time.time()
        answers = ProgressSizes()
        sampler = EtaSampler(lambda: fleet_progress(temporal, sc.name, answers))
        sampling = asyncio.create_task(sampler.run())
        statuses: list[dict[str, Any]] = []
        probing = asyncio.create_task(time_status(temporal, task_queue, sc, connection, statuses))
        for manifest in package_manifests(sc):
            kube.create(PACKAGE_PLURAL, manifest)
        ideal = ideal_makespan(sc, node_names)
        deadline = started + 60 * target.deadline_minutes if target.deadline_minutes else None
        watch = Watch(kube, sc, procs, deadline=deadline)
        sample = Sample(temporal, sc.name, task_queue, sc.windows or sc.nodes, deadline)
        stopped_early = False
        try:
            if sc.sampled:
                end = await run_sample(sample, lambda: _poll_sampled(watch), log)
                done, stopped_early = Completion(end.ended_at, end.ended_at), end.at_deadline
            else:
                completed = await wait_complete(watch, timeout=3 * ideal + 600, log=log)
                if completed is None:
                    end = await halt_and_drain(sample, lambda: _poll_sampled(watch), log, at_deadline=True)
                    completed, stopped_early = Completion(end.ended_at, end.ended_at), True
                done = completed
        finally:
            sampling.cancel()
            probing.cancel()
        cpu_after = resources.snapshot(cpu_pids)
        samples = timeline.stop() if target.cpu_timeline else []
        profiled = profiles.stop()
        after = apimetrics.scrape(target.kubeconfig)
        fleet = await fleet_progress(temporal, sc.name, answers)
        windows = await histories.node_windows(temporal, node_names, started_epoch - 1,
                                               task_queue if sc.sampled else "")
        runs = await fleet_history.fleet_runs(temporal, sc.name)
        measured = {
            "makespan_s": done.nodes_done - started,
            "status_complete_s": done.status_complete - started,
            "started_epoch": started_epoch,
            "last_window_end_s": max((w.closed for w in windows), default=started_epoch) - started_epoch,
            "ideal_makespan_s": ideal,
            "critical_path_s": node_critical_path(sc),
            "batches": batch_sizes(sc, node_names),
            "apiserver_delta": apimetrics.delta(before, after),
            "worker_requests": _summed_counts(procs, WORKER),
            "bridge_requests": procs.procs["bridge"].request_counts(),
            "rollout_events": fleet_history_counts(runs),
            "actual_batches": await histories.fleet_batches(temporal, sc.name),
            "disruptions": disruptions(sc, node_names, windows, fleet),
            "worker_rss": max(m.peak_rss for n, m in procs.procs.items() if n.startswith(WORKER)),
            "workers": target.workers,
            "bridge_rss": procs.procs["bridge"].peak_rss,
            "cordoned": sum(1 for n in kube.nodes(sc.name) if n.spec.unschedulable),
            "cpu": resources.cpu_report(cpu_before, cpu_after, psutil.cpu_count() or 1),
            "stack_rss": sum(procs.external_peak_rss.values()),
            "stack_peak_rss": dict(procs.external_peak_rss),
            "objects_before": objects_before,
            "cpu_samples": samples,
        }
        # The window's stage pods go once their outcome is written (issue #14): give the garbage collector
        # a moment to remove the pods of the last batch before counting what is left.
        await asyncio.sleep(OBJECTS_SETTLE_SECONDS)
        measured["objects_after"] = resources.count_objects(target.kubeconfig)
        row = summarize(sc, measured, windows)
        row.update(scale_figures(runs, windows, Probes(watch.sizes, answers, statuses, plan)))
        row["stopped_at_deadline"] = stopped_early
        # `noderoll status` once more with the windows ended (the fleet halted or complete): the machine quieter.
        row["noderoll_status_after"] = [await asyncio.to_thread(cli_timing.status_run, sc.name, connection)
                                        for _ in range(STATUS_PROBES)]
        end = started_epoch + measured["makespan_s"]
        if sc.sampled or stopped_early:
            # The wave's end is past the sample (or the deadline): judged against its end extrapolated from the
            # windows that ran (bench/eta.py), not against the halt.
            end = extrapolated_end(windows, row["batches"], sc.nodes) or end
            row["eta_judged_against"] = "the wave's end extrapolated from the sample's full batches"
        row["eta"] = eta_accuracy(sampler.samples, started_epoch, end)
        row["eta_first_batch_error"] = row["eta"]["first_batch_error"]
        if profiled:
            row["profile"] = profiled
        return row
    finally:
        procs.stop_all()
        for name in sc.package_names:
            kube.remove(PACKAGE_PLURAL, name)
        kube.remove(POLICY_PLURAL, sc.name)
        kube.api.close()
        await _end_fleet(temporal, sc.name)


def _poll_sampled(watch: Watch) -> None:
    """One poll of a sampled run: every process still up, the status objects' sizes."""
    watch.procs.check_alive()
    for name in watch.sc.package_names:
        watch.sizes.note("Package", watch.kube.package(name).get("status"))
    watch.sizes.note("DeploymentPolicy", watch.kube.policy(watch.sc.name).get("status"))


def _cpu_pids(target: Target, procs: ProcessSet) -> dict[str, int | list[int]]:
    """The process trees whose CPU a run reports: noderoll's, fleetsim's, and the stack's components."""
    pids: dict[str, int | list[int]] = {"worker": procs.pids(WORKER), "bridge": procs.procs["bridge"].proc.pid,
                                        "fleetsim": procs.procs["sim"].proc.pid}
    pids.update({name: pid for name, pid in target.components.items() if name in STACK_CPU})
    return pids


def _summed_counts(procs: ProcessSet, prefix: str) -> dict[str, int]:
    """The request counts of every process named `prefix...` (several workers), summed."""
    total: dict[str, int] = {}
    for name, managed in procs.procs.items():
        if name.startswith(prefix):
            for key, value in managed.request_counts().items():
                total[key] = total.get(key, 0) + value
    return total


async def _end_fleet(temporal: Client, policy: str) -> None:
    """Terminate the run's fleet: its bridge is gone, so nothing would ever tell it its Packages went."""
    try:
        await temporal.get_workflow_handle(fleet_workflow_id(policy)).terminate(reason="noderoll bench run over")
    except RPCError:
        pass  # never started, or already closed
