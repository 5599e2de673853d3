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
import statistics
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
from temporalio.service import RPCError

from api.keys import GROUP, NODE_STATUS_LABEL, PACKAGE_PLURAL, POLICY_PLURAL, VERSION
from bench import apimetrics, histories, makespan_parts, resources
from bench.eta import EtaSampler, eta_accuracy
from bench.procs import Connection, ProcessSet
from bench.profile import Profiles
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
from bench.window_time import median_breakdown
from planning.fleet_status import FleetProgress
from protocol.names import QUERY_PROGRESS, fleet_workflow_id
from protocol.node_settings import EAGER_START_ENV
from workflows.fleet_codec import progress_from_json

POLL_SECONDS = 1.0
OBJECTS_SETTLE_SECONDS = 10.0
WORKER = "worker"
# The stack's processes whose CPU and memory a run reports (names as in stack.json).
STACK_CPU = ("kube-apiserver", "etcd", "temporal", "kube-controller-manager", "kube-scheduler")
FAILED_PHASES = ("Failed", "Halted", "Invalid")
MIB = 2**20
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

    def nodes(self, run: str) -> list[client.V1Node]:
        return self.core.list_node(label_selector=f"{RUN_LABEL}={run}").items

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
    workers = max(8, min(sc.nodes, max(1, sc.nodes * sc.budget_percent // 100)) + 8)
    procs.start_fleet(
        ["--nodes", str(sc.nodes), "--name-prefix", sc.name, "--labels", f"{RUN_LABEL}={sc.name}",
         "--image-store", str(PACKAGES_DIR), "--reboot-seconds", f"{sc.reboot_seconds:g}",
         "--jitter-percent", f"{sc.jitter_percent:g}",
         "--max-grace-seconds", "5", "--workers", str(workers), "--delete-on-exit",
         "--pod-startup-seconds", f"{target.pod_startup_seconds:g}",
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


def _nodes_done(kube: Kube, run: str) -> bool:
    """Every node of the run records the package complete and none is cordoned (the nodes' own view)."""
    nodes = kube.nodes(run)
    return bool(nodes) and all(
        (n.metadata.labels or {}).get(NODE_STATUS_LABEL) == "complete" and not n.spec.unschedulable for n in nodes)


async def wait_complete(kube: Kube, sc: Scenario, procs: ProcessSet, timeout: float, log: Log) -> Completion:
    """Poll the Packages until every `status.phase` is Complete, then the nodes until all are done.

    Both are recorded: a status that says Complete while a node is still in its window is a bug
    the benchmark must not hide (the makespan is until the nodes are done).
    """
    deadline = time.monotonic() + timeout
    last: dict[str, str] = {}
    complete: set[str] = set()
    said_complete: float | None = None
    while time.monotonic() < deadline:
        procs.check_alive()
        for name in sc.package_names:
            if name in complete:
                continue
            status = kube.package(name).get("status") or {}
            phase = status.get("phase", "")
            if phase in FAILED_PHASES:
                raise RuntimeError(f"Package {name} ended {phase}: {status.get('message', '')}")
            if phase == "Complete":
                complete.add(name)
            line = f"{phase or 'no status'} {status.get('progress', '')}"
            if line != last.get(name):
                log(f"  {name}: {line}")
                last[name] = line
        if said_complete is None and len(complete) == sc.packages:
            said_complete = time.monotonic()
        if said_complete is not None and _nodes_done(kube, sc.name):
            return Completion(said_complete, time.monotonic())
        # An asyncio sleep, so Ctrl-C (task cancellation) ends the run and its processes promptly.
        await asyncio.sleep(POLL_SECONDS)
    raise TimeoutError(f"Packages {', '.join(sc.package_names)} not Complete on every node after {timeout:.0f}s "
                       f"(last: {last})")


async def fleet_progress(temporal: Client, policy: str) -> FleetProgress | None:
    """The fleet's `progress` (None when it does not answer: its disruption counts are then not reported)."""
    try:
        return progress_from_json(await temporal.get_workflow_handle(fleet_workflow_id(policy)).query(QUERY_PROGRESS))
    except Exception:  # noqa: BLE001 - reported as missing, the histories still count
        return None


def disruptions(sc: Scenario, nodes: list[str], windows: list[histories.WindowStats],
                fleet: FleetProgress | None) -> dict[str, Any]:
    """Windows, drains and interrupts per node, from the node histories and from the fleet. Pure."""
    found: dict[str, Any] = {"packages": sc.packages}
    for kind in ("windows", "drains", "interrupts"):
        counts = histories.per_node(windows, nodes, kind)
        found[f"{kind}_per_node"] = histories.histogram_text(counts)
        found[f"{kind}_per_node_histogram"] = histories.histogram(counts)
    if fleet is not None:
        for kind in ("drains", "interrupts"):
            counts = {n: int(getattr(fleet.nodes[n], kind)) if n in fleet.nodes else 0 for n in nodes}
            found[f"fleet_{kind}_per_node"] = histories.histogram_text(counts)
        found["fleet_waves"] = fleet.wave
    return found


def _requests(counts: dict[str, int], windows: int) -> dict[str, float]:
    per = max(1, windows)
    return {k: round(v / per, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def splits_of(actual: list[int], planned: list[int]) -> bool:
    """True when `actual` is `planned` with some batches cut in consecutive parts. Pure."""
    position, total = 0, 0
    for size in actual:
        if position >= len(planned):
            return False
        total += size
        if total > planned[position]:
            return False
        if total == planned[position]:
            position, total = position + 1, 0
    return position == len(planned) and total == 0


def summarize(sc: Scenario, measured: dict[str, Any], windows: list[histories.WindowStats]) -> dict[str, Any]:
    """The result row of one size from raw measurements. Pure."""
    critical = measured["critical_path_s"]
    overheads = [w.seconds - critical for w in windows]
    # To the answer to the fleet, which the fleet's next step waits for; the run then still gets the
    # signal's delivery and one more workflow task before it closes.
    answer_overheads = [(w.answered or w.closed) - w.started - critical for w in windows]
    times = [w.time for w in windows if w.time is not None]
    first_waits = [t.first_task_queued_s for t in times]
    makespan = measured["makespan_s"]
    # "The ideal for the same batches": the batches the rollout really ran (they can differ from the
    # plan, e.g. when nodes are re-listed mid-rollout), each as long as one node's critical path.
    actual_batches = measured["actual_batches"]
    barriers = actual_batches or measured["batches"]
    ideal = len(actual_batches) * critical if actual_batches else measured["ideal_makespan_s"]
    if sc.jitter_percent or sc.strategy == "rolling":
        # Nodes of their own speed, or no batches: the ideal of the nodes' own critical paths.
        ideal = measured["ideal_makespan_s"]
    elif actual_batches and splits_of(actual_batches, measured["batches"]):
        # The planned batches, each handed over in chunks that straggled apart (at 1,000 nodes a batch
        # of 250 went out as five 50-node `request_windows` calls, seconds apart): not more batches.
        ideal = len(measured["batches"]) * critical
        barriers = measured["batches"]
    api_delta = measured["apiserver_delta"]
    noderoll_counts: dict[str, int] = {}
    for name in ("worker", "bridge"):
        for key, value in measured[f"{name}_requests"].items():
            noderoll_counts[key] = noderoll_counts.get(key, 0) + value
    cpu = measured.get("cpu") or {"seconds": {}, "share": {}}
    share = cpu["share"]
    n = max(1, len(windows))
    created = apimetrics.created(api_delta)
    span = max((w.closed for w in windows), default=0.0) - min((w.started for w in windows), default=0.0)
    return {
        "nodes": sc.nodes,
        "strategy": sc.strategy,
        "budget_percent": sc.budget_percent,
        "jitter_percent": sc.jitter_percent,
        "makespan_s": round(makespan, 1),
        # When the Package status first said Complete (a value well under makespan_s means it said so early).
        "status_complete_s": round(measured["status_complete_s"], 1),
        "ideal_makespan_s": round(ideal, 1),
        "planned_ideal_makespan_s": round(measured["ideal_makespan_s"], 1),
        # The last node window's end: the makespan without the bridge's status-write delay (<= 3 s).
        "last_window_end_s": round(measured["last_window_end_s"], 1),
        "overhead_ratio": round(makespan / ideal, 3) if ideal else None,
        "batches": actual_batches,
        "planned_batches": measured["batches"],
        "windows": len(windows),
        # The peak disruption: the most node windows that ran at once.
        "peak_windows": histories.peak_overlap(windows),
        "node_critical_path_s": critical,
        "window_median_s": round(statistics.median([w.seconds for w in windows]), 2) if windows else None,
        "overhead_median_s": round(statistics.median(overheads), 2) if overheads else None,
        "overhead_p95_s": round(histories.percentile(overheads, 95), 2) if overheads else None,
        "answer_overhead_median_s": round(statistics.median(answer_overheads), 2) if answer_overheads else None,
        "answer_overhead_p95_s": round(histories.percentile(answer_overheads, 95), 2) if answer_overheads else None,
        # Median seconds of a window: queued, running per activity type, between activities.
        "window_time_median_s": median_breakdown(times),
        # How late the last windows of a batch began: their first workflow task's wait, p95 and max.
        "first_task_queued_p95_s": round(histories.percentile(first_waits, 95), 2) if first_waits else None,
        "first_task_queued_max_s": round(max(first_waits), 2) if first_waits else None,
        "windows_per_s": round(len(windows) / makespan, 3) if makespan else None,
        # Windows per second while windows ran (first window start to last window end).
        "throughput_windows_per_s": round(len(windows) / span, 3) if span > 0 else None,
        "apiserver_requests_per_window_all_clients": round(sum(api_delta.values()) / n, 1),
        "apiserver_requests_per_window_by_verb_resource": apimetrics.per_window(api_delta, n),
        "noderoll_requests_per_window": round(sum(noderoll_counts.values()) / n, 1),
        "noderoll_requests_per_window_by_verb_resource": _requests(noderoll_counts, n),
        "worker_requests_per_window": round(sum(measured["worker_requests"].values()) / n, 1),
        "bridge_requests_total": sum(measured["bridge_requests"].values()),
        "history_events_per_window_median": statistics.median([w.events for w in windows]) if windows else None,
        "stage_pods_per_window_median": statistics.median([w.stage_pods for w in windows]) if windows else None,
        "history_events_per_window_max": max((w.events for w in windows), default=None),
        "activities_per_window_median": statistics.median([w.activities for w in windows]) if windows else None,
        "local_activities_per_window_median": (statistics.median([w.local_activities for w in windows])
                                               if windows else None),
        "workflow_tasks_per_window_median": statistics.median([w.workflow_tasks for w in windows]) if windows else None,
        # Workflow tasks timed out, per window (mean): a saturated worker's sign (docs/benchmarks.md).
        "workflow_task_sticky_timeouts_per_window": round(sum(w.sticky_timeouts for w in windows) / n, 3),
        "workflow_task_running_timeouts_per_window": round(sum(w.running_timeouts for w in windows) / n, 3),
        # Objects every client created per window (the apiserver's POSTs of a resource, no subresource).
        "objects_created_per_window": round(sum(created.values()) / n, 1),
        "objects_created_per_window_by_resource": apimetrics.per_window(created, n),
        "fleet_history_events": measured["rollout_events"].events,
        "fleet_workflow_tasks": measured["rollout_events"].workflow_tasks,
        "fleet_workflow_task_sticky_timeouts": measured["rollout_events"].sticky_timeouts,
        "fleet_workflow_task_running_timeouts": measured["rollout_events"].running_timeouts,
        **measured.get("disruptions", {}),
        # The makespan's excess over the ideal, by part (bench/makespan_parts.py); batches only.
        "makespan_parts": {} if sc.jitter_percent or sc.strategy == "rolling" else makespan_parts.parts(
            windows, barriers, critical, measured.get("started_epoch", 0.0), makespan),
        "worker_peak_rss_mib": round(measured["worker_rss"] / MIB, 1),
        "workers": measured.get("workers", 1),
        "bridge_peak_rss_mib": round(measured["bridge_rss"] / MIB, 1),
        "nodes_left_cordoned": measured["cordoned"],
        # CPU over the rollout, per component (seconds, and share of the machine: wall x cores).
        "cpu_seconds": cpu["seconds"],
        "cpu_share": share,
        "noderoll_cpu_share": round(share.get("worker", 0.0) + share.get("bridge", 0.0), 3),
        "fleetsim_cpu_share": share.get("fleetsim", 0.0),
        "apiserver_etcd_peak_rss_mib": round(measured.get("stack_rss", 0) / MIB, 1),
        "stack_peak_rss_mib": {k: round(v / MIB, 1) for k, v in (measured.get("stack_peak_rss") or {}).items()},
        "objects_before": measured.get("objects_before", {}),
        "objects_after": measured.get("objects_after", {}),
    }


async def run_rollout(target: Target, sc: Scenario, temporal: Client, log: Log) -> dict[str, Any]:
    """Run one scenario end to end and return its result row."""
    procs = ProcessSet(target.workdir)
    kube = Kube(target.kubeconfig)
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        log(f"{sc.name}: starting {sc.nodes} simulated nodes, worker and bridge (task queue {task_queue})")
        start_processes(target, sc, procs, task_queue)
        for name in ("kube-apiserver", "etcd"):
            if name in target.components:
                procs.external[name] = target.components[name]
        node_names = sorted(n.metadata.name for n in kube.nodes(sc.name))
        kube.create(POLICY_PLURAL, policy_manifest(sc))
        objects_before = resources.count_objects(target.kubeconfig)
        before = apimetrics.scrape(target.kubeconfig)
        cpu_pids = _cpu_pids(target, procs)
        cpu_before = resources.snapshot(cpu_pids)
        profiles = Profiles(target.workdir, sc.name)
        if target.profile:
            for name, managed in procs.procs.items():
                profiles.attach(name, managed.proc.pid)
        started, started_epoch = time.monotonic(), time.time()
        sampler = EtaSampler(lambda: fleet_progress(temporal, sc.name))
        sampling = asyncio.create_task(sampler.run())
        for manifest in package_manifests(sc):
            kube.create(PACKAGE_PLURAL, manifest)
        ideal = ideal_makespan(sc, node_names)
        try:
            done = await wait_complete(kube, sc, procs, timeout=3 * ideal + 600, log=log)
        finally:
            sampling.cancel()
        cpu_after = resources.snapshot(cpu_pids)
        profiled = profiles.stop()
        after = apimetrics.scrape(target.kubeconfig)
        fleet = await fleet_progress(temporal, sc.name)
        windows = await histories.node_windows(temporal, node_names, started_epoch - 1)
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
            "rollout_events": await histories.fleet_events(temporal, sc.name),
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
        }
        # The window's stage pods go once their outcome is written (issue #14): give the garbage collector
        # a moment to remove the pods of the last batch before counting what is left.
        await asyncio.sleep(OBJECTS_SETTLE_SECONDS)
        measured["objects_after"] = resources.count_objects(target.kubeconfig)
        row = summarize(sc, measured, windows)
        row["eta"] = eta_accuracy(sampler.samples, started_epoch, started_epoch + measured["makespan_s"])
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
