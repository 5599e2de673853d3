"""The result row of one benchmark rollout from its raw measurements (bench/rollout.py measures). Pure.

`summarize` turns what `run_rollout` measured (makespan, the batches, API and CPU deltas, the node
windows read from the histories) into the row the bench prints and writes: the ratio to the ideal
of the batches really run, the window overhead, the makespan's parts, requests and objects per window.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench import apimetrics, cpu_timeline, histories, makespan_parts, resources
from bench.scenario import Scenario
from bench.window_time import median_breakdown
from planning.views.fleet_status import FleetProgress

MIB = 2**20


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
            if getattr(fleet, "disruption_nodes", None):
                # The fleet's own sums (issue 45: its answer lists no node unless asked): nodes per count,
                # the run's nodes it does not target counted at 0.
                per = {int(k): v for k, v in fleet.disruption_nodes.get(kind, {}).items()}
                per[0] = per.get(0, 0) + max(0, len(nodes) - fleet.total_nodes)
                found[f"fleet_{kind}_per_node"] = " ".join(f"{k}×{v}" for k, v in sorted(per.items()) if v) or "-"
                continue
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
    answer_overheads = [w.answer_at - w.started - critical for w in windows]
    times = [w.time for w in windows if w.time is not None]
    first_waits = [t.first_task_queued_s for t in times]
    makespan = measured["makespan_s"]
    # "The ideal for the same batches": the batches the rollout really ran (they can differ from the
    # plan, e.g. when nodes are re-listed mid-rollout), each as long as one node's critical path.
    actual_batches = measured["actual_batches"]
    barriers = actual_batches or measured["batches"]
    ideal = len(actual_batches) * critical if actual_batches else measured["ideal_makespan_s"]
    # Batches of nodes of one speed: the ideal, the makespan's parts and the CPU by batch are per batch.
    batched = not (sc.jitter_percent or sc.strategy == "rolling")
    if not batched:
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
        "budget_count": sc.budget_count,
        "floor_percent": sc.floor_percent,
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
        "makespan_parts": {} if not batched else makespan_parts.parts(
            windows, barriers, critical, measured.get("started_epoch", 0.0), makespan),
        # `--cpu-timeline`: per batch, the seconds with the cores saturated and the bursts.
        "cpu_timeline": cpu_timeline.per_batch(measured["cpu_samples"], makespan_parts.spans(windows, barriers))
        if measured.get("cpu_samples") and batched else [],
        "worker_peak_rss_mib": round(measured["worker_rss"] / MIB, 1),
        "workers": measured.get("workers", 1),
        "bridge_peak_rss_mib": round(measured["bridge_rss"] / MIB, 1),
        "nodes_left_cordoned": measured["cordoned"],
        # CPU over the rollout, per component (seconds, and share of the machine: wall x cores).
        "cpu_seconds": cpu["seconds"],
        "cpu_share": share,
        "noderoll_cpu_share": round(share.get("worker", 0.0) + share.get("bridge", 0.0), 3),
        # CPU seconds per window (issue 45: noderoll's is the worker's and the bridge's), and every component's.
        "cpu_seconds_per_window": resources.per_window(cpu["seconds"], len(windows)),
        "noderoll_cpu_seconds_per_window": round(
            (cpu["seconds"].get("worker", 0.0) + cpu["seconds"].get("bridge", 0.0)) / n, 4),
        "all_cpu_seconds_per_window": round(sum(cpu["seconds"].values()) / n, 4),
        "fleetsim_cpu_share": share.get("fleetsim", 0.0),
        "apiserver_etcd_peak_rss_mib": round(measured.get("stack_rss", 0) / MIB, 1),
        "stack_peak_rss_mib": {k: round(v / MIB, 1) for k, v in (measured.get("stack_peak_rss") or {}).items()},
        "objects_before": measured.get("objects_before", {}),
        "objects_after": measured.get("objects_after", {}),
    }
