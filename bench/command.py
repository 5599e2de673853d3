"""`noderoll bench --nodes N [N...] [--packages P] [--json FILE]`: rollout overhead, disruptions, API cost, scale. Does I/O.

Per fleet size: a fleet rollout of `--packages` Packages of `bench-sleep` (default 2: the second
depends on the first, both reboot; every stage 5 s, reboot 15 s; exponential policy, initialBatch 1,
growthFactor 2, budget 25%) on simulated nodes, measured against its ideal makespan, with the
windows, drains and interrupts per node (from the node workflows' histories and from the fleet);
a throughput rollout of the same size (one Package without interrupt, 0 s stages, one batch of
every node) for noderoll's windows per second and the per-window targets (history events, API
requests); and the bare Temporal floor (a workflow per node running as many no-op local activities
and activities as a window runs). Once per run: the drain of one node with 10 pods, noderoll vs `kubectl drain`. Runs
on the dev stack (`--state-dir`, `$NODEROLL_STATE_DIR`, `.noderoll/`) when one runs, else on a
private stack started in a temporary directory and stopped afterwards. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from temporalio.client import Client

from bench import decisions, resources
from bench.calibrate import cpu_seconds_of_fixed_work
from bench.drain import compare_drains
from bench.floor import measure_floor
from bench.profile import render_profile
from bench.rollout import Target, run_rollout
from bench.scale_probes import (
    LARGE_FLEET,
    LARGE_SIM_HEARTBEAT_SECONDS,
    SCALE_FIGURES,
    SIM_HEARTBEAT_SECONDS,
    register_scale_flags,
)
from bench.scenario import Scenario
from localstack.state import StackInfo, load_stack_info
from service.temporal_client import connect
from worker.tuning import pollers_from_env, sticky_schedule_to_start_from_env

DEFAULT_SIZES = (50, 200, 1000)
console = Console(stderr=True)

# The figures summarised when a size is repeated (`--nodes 200 200 200`): one run is not a result on a
# shared 2-core machine (the same code measured 1.44 and 1.75), so repeated runs give median and spread.
SUMMARISED = (
    "makespan_s", "overhead_ratio", "overhead_median_s", "answer_overhead_median_s", "noderoll_requests_per_window",
    "no_interrupt_noderoll_requests_per_window", "history_events_per_window_median",
    "no_interrupt_history_events_per_window_median", "throughput_windows_per_s", "ratio_to_floor",
    "worker_peak_rss_mib", "bridge_peak_rss_mib", "apiserver_etcd_peak_rss_mib", "noderoll_cpu_share",
    "fleetsim_cpu_share", "noderoll_cpu_seconds_per_window", "all_cpu_seconds_per_window", "noderoll_status_median_s",
    "largest_payload_any_bytes", "eta_first_batch_error",
)

WIDTH = 120  # the summary's lines never exceed it (issue #26: no table cut to "…")


def _num(value: Any, unit: str = "") -> str:
    return "?" if value is None else f"{value}{unit}"


def _median(row: dict[str, Any], part: str) -> str:
    return _num((row.get("window_time_median_s") or {}).get(part), " s")


def _join(row: dict[str, Any], keys: tuple[str, ...], sep: str = " / ", unit: str = "") -> str:
    return sep.join(_num(row.get(k), unit) for k in keys)


def _by_component(seconds: dict[str, float]) -> str:
    """`all 0.41, kube-apiserver 0.12, ...`: the total first, then the components, largest first."""
    parts = sorted(((k, v) for k, v in seconds.items() if k != "all"), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.3f}" for k, v in [("all", seconds.get("all", 0.0)), *parts])


# One figure per line: its label, the key a run must have to show it, and how to read it from the row.
FIGURES: tuple[tuple[str, str, Any], ...] = (
    ("peak windows at once", "peak_windows", lambda r: r["peak_windows"]),
    ("makespan / ideal (s) / ratio", "makespan_s",
     lambda r: f"{_join(r, ('makespan_s', 'ideal_makespan_s'))} / {_num(r.get('overhead_ratio'))}"),
    ("window overhead p50 / p95 (s)", "overhead_median_s", lambda r: _join(r, ("overhead_median_s", "overhead_p95_s"))),
    ("  to the answer to the fleet p50 / p95", "answer_overhead_median_s",
     lambda r: _join(r, ("answer_overhead_median_s", "answer_overhead_p95_s"))),
    ("batches", "batches", lambda r: " ".join(str(b) for b in r["batches"])),
    ("  seconds with the cores saturated, per batch", "cpu_timeline",
     lambda r: " ".join(str(b.get("saturated_s", "?")) for b in r["cpu_timeline"])),
    ("  makespan over ideal: start / batches / turns / tail (s)", "makespan_parts", lambda r: " / ".join(
        str(r["makespan_parts"][k]) for k in ("start_s", "batch_overheads_sum_s", "turns_sum_s", "tail_s"))),
    ("windows / drains / interrupts per node", "windows_per_node",
     lambda r: _join(r, ("windows_per_node", "drains_per_node", "interrupts_per_node"))),
    ("the fleet's drains / interrupts per node", "fleet_drains_per_node",
     lambda r: _join(r, ("fleet_drains_per_node", "fleet_interrupts_per_node"))),
    ("stage pods per window (median)", "stage_pods_per_window_median", lambda r: r["stage_pods_per_window_median"]),
    ("objects created per window (all clients)", "objects_created_per_window",
     lambda r: r["objects_created_per_window"]),
    ("noderoll API requests per window", "noderoll_requests_per_window", lambda r: r["noderoll_requests_per_window"]),
    ("  all clients' API requests per window", "apiserver_requests_per_window_all_clients",
     lambda r: r["apiserver_requests_per_window_all_clients"]),
    ("  one Package without interrupt", "no_interrupt_noderoll_requests_per_window",
     lambda r: r["no_interrupt_noderoll_requests_per_window"]),
    ("history events per window (median / max)", "history_events_per_window_median",
     lambda r: _join(r, ("history_events_per_window_median", "history_events_per_window_max"))),
    ("  one Package without interrupt", "no_interrupt_history_events_per_window_median",
     lambda r: r["no_interrupt_history_events_per_window_median"]),
    ("activities / local activities per window", "activities_per_window_median",
     lambda r: _join(r, ("activities_per_window_median", "local_activities_per_window_median"))),
    ("workflow tasks per window (median)", "workflow_tasks_per_window_median",
     lambda r: r["workflow_tasks_per_window_median"]),
    ("workflow tasks timed out per window: sticky queue / running", "workflow_task_sticky_timeouts_per_window",
     lambda r: _join(r, ("workflow_task_sticky_timeouts_per_window", "workflow_task_running_timeouts_per_window"))),
    ("the fleet's workflow tasks / timed out: sticky queue / running", "fleet_workflow_tasks",
     lambda r: _join(r, ("fleet_workflow_tasks", "fleet_workflow_task_sticky_timeouts",
                         "fleet_workflow_task_running_timeouts"))),
    ("window median", "window_time_median_s", lambda r: _median(r, "window")),
    ("  workflow tasks queued / running", "window_time_median_s",
     lambda r: f"{_median(r, 'workflow_tasks_queued')} / {_median(r, 'workflow_tasks_running')}"),
    ("  first workflow task queued", "window_time_median_s", lambda r: _median(r, "first_workflow_task_queued")),
    ("  activities queued", "window_time_median_s", lambda r: _median(r, "activities_queued")),
    ("throughput windows/s / floor / ratio", "throughput_windows_per_s",
     lambda r: _join(r, ("throughput_windows_per_s", "floor_windows_per_s", "ratio_to_floor"))),
    ("  0-second rollout: cores busy; CPU s per window", "no_interrupt_cpu_cores",
     lambda r: f"{r['no_interrupt_cpu_cores']}; " + _by_component(r.get("no_interrupt_cpu_seconds_per_window") or {})),
    ("  floor: cores busy; CPU s per window", "floor_cpu_cores",
     lambda r: f"{r['floor_cpu_cores']}; " + _by_component(r.get("floor_cpu_seconds_per_window") or {})),
    ("CPU share noderoll / fleetsim", "noderoll_cpu_share",
     lambda r: _join(r, ("noderoll_cpu_share", "fleetsim_cpu_share"))),
    ("CPU seconds by component", "cpu_seconds", lambda r: ", ".join(
        f"{k} {v:.0f}" for k, v in sorted(r["cpu_seconds"].items(), key=lambda kv: -kv[1]))),
    ("peak RSS worker / bridge / apiserver+etcd", "worker_peak_rss_mib",
     lambda r: _join(r, ("worker_peak_rss_mib", "bridge_peak_rss_mib", "apiserver_etcd_peak_rss_mib"), unit=" MiB")),
    ("objects left", "objects_left", lambda r: r["objects_left"]),
    *SCALE_FIGURES,
    ("load average after", "load_average_after", lambda r: " ".join(str(x) for x in r["load_average_after"])),
    ("fixed work's CPU seconds after", "calibration_cpu_seconds_after",
     lambda r: r["calibration_cpu_seconds_after"]),
)


def _fit(line: str) -> str:
    """A line cut to WIDTH, on a word boundary, with nothing hidden behind an ellipsis: a value too
    long for one line goes on the next lines, indented."""
    if len(line) <= WIDTH:
        return line
    head, rest = line[:WIDTH].rsplit(" ", 1) if " " in line[:WIDTH] else (line[:WIDTH], "")
    tail = rest + line[WIDTH:]
    return head + "\n" + _fit(" " * 44 + tail.lstrip())


def register(subparsers: Any) -> None:
    """Add `noderoll bench`."""
    p = subparsers.add_parser("bench", help="benchmark rollouts on the local stack (overhead, API cost, scale)")
    p.add_argument("--nodes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                   help="fleet sizes (default 50 200 1000)")
    p.add_argument("--json", type=Path, help="write the results as JSON to this file")
    p.add_argument("--state-dir", help="dev stack to run on (default: $NODEROLL_STATE_DIR or .noderoll/)")
    p.add_argument("--private-stack", action="store_true", help="always start a private stack in a temp dir")
    p.add_argument("--packages", type=int, default=2, choices=range(1, 6), metavar="P",
                   help="Packages in the fleet, each depending on the one before, all rebooting (default 2)")
    p.add_argument("--stage-seconds", type=float, default=5.0, help="seconds per stage (default 5)")
    p.add_argument("--reboot-seconds", type=float, default=15.0, help="seconds per reboot (default 15)")
    p.add_argument("--strategy", choices=("exponential", "linear", "fixed", "rolling"), default="exponential",
                   help="the rollout's strategy (default exponential, initialBatch 1, growthFactor 2)")
    p.add_argument("--budget-percent", type=int, default=25, help="the policy's budget in percent (default 25)")
    p.add_argument("--initial-batch", type=int, default=1, help="initialBatch of fixed, linear, exponential")
    p.add_argument("--delta", type=int, default=1, help="linear's delta (default 1)")
    p.add_argument("--jitter-percent", type=float, default=0.0,
                   help="fleetsim's --jitter-percent: each node's stages and reboot take its own factor of "
                        "their time, in [1-P/100, 1+P/100] (default 0)")
    register_scale_flags(p)
    p.add_argument("--skip-throughput", action="store_true", help="no 0-second throughput rollout")
    p.add_argument("--skip-floor", action="store_true", help="no bare Temporal floor")
    p.add_argument("--skip-drain", action="store_true", help="no drain comparison")
    p.add_argument("--drain-rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=1,
                   help="`noderoll worker` processes on the run's task queue, sharing the work (default 1)")
    p.add_argument("--pod-startup-seconds", type=float, default=1.0,
                   help="fleetsim's modelled stage pod start-up (default 1, as `noderoll sim`)")
    p.add_argument("--profile", action="store_true",
                   help="py-spy on worker, bridge and fleetsim during each rollout: raw profiles in the workdir, "
                        "a summary printed and in the JSON (needs py-spy)")
    p.add_argument("--cpu-timeline", action="store_true",
                   help="sample the machine's and each component's CPU every 0.25 s during each rollout: per batch, "
                        "the seconds with the cores saturated and the bursts (bench/cpu_timeline.py)")
    p.add_argument("--workdir", type=Path, help="logs of the benchmark's processes (default: a temp dir)")
    p.set_defaults(func=run)


@contextlib.contextmanager
def _stack(args: argparse.Namespace) -> Iterator[StackInfo]:
    if not args.private_stack:
        info = load_stack_info(args.state_dir)
        if info is not None and info.is_running():
            console.print(f"bench: on the dev stack in {info.state_dir}")
            yield info
            return
    from localstack.stack import down, up

    state_dir = Path(tempfile.mkdtemp(prefix="noderoll-bench-stack-"))
    console.print(f"bench: starting a private stack in {state_dir}")
    try:
        yield up(state_dir, progress=lambda line: console.print(f"  {line}"))
    finally:
        down(state_dir, purge=True)


def _log(line: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {line}")


def _environment(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "cpus": psutil.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(), "stage_seconds": args.stage_seconds, "packages": args.packages,
        "reboot_seconds": args.reboot_seconds, "strategy": args.strategy, "budget_percent": args.budget_percent,
        "initial_batch": args.initial_batch, "delta": args.delta, "jitter_percent": args.jitter_percent,
        "budget_count": args.budget_count, "floor_percent": args.floor_percent, "windows": args.windows,
        "deadline_minutes": args.deadline_minutes,
        "sim_heartbeat_seconds": args.sim_heartbeat_seconds,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "workers": args.workers, "pod_startup_seconds": args.pod_startup_seconds,
        # The workers' (and the floor's) workflow task polling: None is the SDK's.
        "workflow_task_pollers": pollers_from_env(),
        "sticky_schedule_to_start_seconds": sticky_schedule_to_start_from_env(),
        "load_average_at_start": [round(x, 2) for x in psutil.getloadavg()],
        # The machine's speed now (bench/calibrate.py): compare CPU figures across sittings by it.
        "calibration_cpu_seconds_at_start": cpu_seconds_of_fixed_work(),
    }


def _save(args: argparse.Namespace, report: dict[str, Any]) -> None:
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def floor_shape(row: dict[str, Any]) -> tuple[int, int]:
    """The floor workflow's activities and local activities: the throughput window's medians (a window
    of one Package without interrupt), else the measured rollout's. Local activities count as local
    activities: run as activities they would cost the floor more than they cost the window (ADR 0020)."""
    measured = "no_interrupt_" if row.get("no_interrupt_activities_per_window_median") else ""
    activities = int(row.get(f"{measured}activities_per_window_median") or 1)
    local_activities = int(row.get(f"{measured}local_activities_per_window_median") or 0)
    return activities, local_activities


async def _measure_size(args: argparse.Namespace, target: Target, temporal: Client, size: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:4]
    sc = Scenario(f"bench{size}-{tag}", size, args.stage_seconds, args.reboot_seconds, packages=args.packages,
                  strategy=args.strategy, budget_percent=args.budget_percent, initial_batch=args.initial_batch,
                  delta=args.delta, jitter_percent=args.jitter_percent, budget_count=args.budget_count,
                  floor_percent=args.floor_percent, windows=args.windows if args.windows and args.windows < size else None)
    heartbeat = args.sim_heartbeat_seconds or (SIM_HEARTBEAT_SECONDS if size <= LARGE_FLEET else LARGE_SIM_HEARTBEAT_SECONDS)
    row = await run_rollout(replace(target, sim_heartbeat_seconds=heartbeat), sc, temporal, _log)
    row["sim_heartbeat_seconds"] = heartbeat
    row["windows_sampled"] = sc.windows
    row["objects_left"] = objects_left(row.get("objects_before") or {}, row.get("objects_after") or {})
    _log(f"{size} nodes, {args.packages} package(s): makespan {row['makespan_s']} s, ideal "
         f"{row['ideal_makespan_s']} s, ratio {row['overhead_ratio']}; per node: windows {row['windows_per_node']}, "
         f"drains {row['drains_per_node']}, interrupts {row['interrupts_per_node']}")
    if row.get("window_time_median_s"):
        parts = ", ".join(f"{k} {v}" for k, v in row["window_time_median_s"].items())
        _log(f"{size} nodes: a window's median seconds: {parts}")
    if not args.skip_throughput:
        # One batch of every node, 0 s stages, no interrupt: orchestration only, and the window
        # the API and history targets are stated for (one package without interrupt, whatever --packages).
        fast = Scenario(f"tput{size}-{tag}", size, 0.0, 0.0, strategy="fixed", initial_batch=size,
                        budget_percent=100, reboot=False)
        tput = await run_rollout(target, fast, temporal, _log)
        row["throughput_windows_per_s"] = tput["throughput_windows_per_s"]
        row["throughput_makespan_s"] = tput["makespan_s"]
        row["no_interrupt_noderoll_requests_per_window"] = tput["noderoll_requests_per_window"]
        row["no_interrupt_worker_requests_per_window"] = tput["worker_requests_per_window"]
        row["no_interrupt_requests_by_verb_resource"] = tput["noderoll_requests_per_window_by_verb_resource"]
        row["no_interrupt_history_events_per_window_median"] = tput["history_events_per_window_median"]
        row["no_interrupt_activities_per_window_median"] = tput["activities_per_window_median"]
        row["no_interrupt_local_activities_per_window_median"] = tput["local_activities_per_window_median"]
        # What limits the 0-second rollout: the machine's cores it kept busy, and who used them.
        row["no_interrupt_cpu_seconds_per_window"] = resources.per_window(tput["cpu_seconds"], size)
        row["no_interrupt_cpu_cores"] = resources.cores_busy(tput["cpu_seconds"], tput["makespan_s"])
    if not args.skip_floor:
        activities, local_activities = floor_shape(row)
        # Polling like the rollout's `noderoll worker`s (they inherit NODEROLL_WORKFLOW_TASK_POLLERS).
        # The floor's CPU: the Temporal server's and this process's (its worker and its client).
        pids = {"bench": os.getpid()}
        if "temporal" in target.components:
            pids["temporal"] = target.components["temporal"]
        before = resources.snapshot(pids)
        floor = await measure_floor(temporal, size, activities, pollers=pollers_from_env(),
                                    local_activities=local_activities)
        after = resources.snapshot(pids)
        used = resources.cpu_report(before, after, psutil.cpu_count() or 1)["seconds"]
        row["floor_cpu_seconds_per_window"] = resources.per_window(used, size)
        # Over the snapshots' interval (its worker's start and stop included), not the floor's timed span.
        row["floor_cpu_cores"] = resources.cores_busy(used, after.at - before.at)
        row["floor_activities_per_workflow"] = activities
        row["floor_local_activities_per_workflow"] = local_activities
        row["floor_windows_per_s"] = round(floor.workflows_per_s, 3)
        row["floor_activities_per_s"] = round(floor.activities_per_s, 1)
        if row.get("throughput_windows_per_s"):
            row["ratio_to_floor"] = round(row["throughput_windows_per_s"] / floor.workflows_per_s, 3)
    return row


async def _measure(args: argparse.Namespace, stack: StackInfo, workdir: Path) -> dict[str, Any]:
    temporal = await connect(stack.temporal_address)
    target = Target(stack.temporal_address, stack.kubeconfig, workdir, workers=max(1, args.workers),
                    components={name: c.pid for name, c in stack.components.items()},
                    pod_startup_seconds=max(0.0, args.pod_startup_seconds), profile=args.profile,
                    cpu_timeline=args.cpu_timeline, plan_timeout_seconds=args.plan_timeout,
                    deadline_minutes=args.deadline_minutes)
    report: dict[str, Any] = {"results": [], "environment": _environment(args)}
    if not args.skip_drain:
        _log("drain: one node, 10 pods, noderoll vs kubectl drain")
        report["drain"] = await asyncio.to_thread(lambda: compare_drains(stack.kubeconfig, args.drain_rounds).as_dict())
        _save(args, report)
    for size in args.nodes:
        row = await _measure_size(args, target, temporal, size)
        row["load_average_after"] = [round(x, 2) for x in psutil.getloadavg()]
        row["calibration_cpu_seconds_after"] = cpu_seconds_of_fixed_work()
        report["results"].append(row)
        report["repeats"] = repeat_summary(report["results"])
        _save(args, report)  # partial results survive an interrupted run
    return report


def repeat_summary(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fleet size run more than once: the runs, and median, min and max of each SUMMARISED figure
    present in every run (spread = (max - min) / median). Pure."""
    sizes: dict[int, list[dict[str, Any]]] = {}
    for row in results:
        sizes.setdefault(int(row["nodes"]), []).append(row)
    summary = []
    for size, rows in sizes.items():
        if len(rows) < 2:
            continue
        entry: dict[str, Any] = {"nodes": size, "runs": len(rows)}
        for key in SUMMARISED:
            values = [row[key] for row in rows if isinstance(row.get(key), (int, float))]
            if len(values) != len(rows):
                continue
            median = statistics.median(values)
            entry[key] = {"median": round(median, 3), "min": min(values), "max": max(values),
                          "spread": round((max(values) - min(values)) / median, 3) if median else 0.0}
        summary.append(entry)
    return summary


def render_summary(summary: list[dict[str, Any]]) -> list[str]:
    """Medians and ranges of repeated sizes, one figure per line: `median [min-max]`. Pure."""
    lines: list[str] = []
    for entry in summary:
        lines.append(f"noderoll bench: {entry['nodes']} nodes, {entry['runs']} runs (median [min-max], spread)")
        for key in SUMMARISED:
            cell = entry.get(key)
            if cell:
                lines.append(_fit(f"  {key:<44} {cell['median']} [{cell['min']}-{cell['max']}], {cell['spread']}"))
    return lines


def objects_left(before: dict[str, int], after: dict[str, int]) -> str:
    """What a rollout left in the apiserver: `+N kind` per kind that grew, "none" when nothing did. Pure."""
    grown = [f"+{after[k] - before.get(k, 0)} {k}" for k in sorted(after) if after[k] > before.get(k, 0)]
    return ", ".join(grown) or "none"


def render(report: dict[str, Any]) -> list[str]:
    """The results as lines of at most WIDTH characters: per run, one figure per line. Pure."""
    lines: list[str] = []
    for index, row in enumerate(report["results"], 1):
        budget = (f"{row['budget_count']} nodes" if row.get("budget_count") else f"{row.get('budget_percent', 25)}%")
        floor = f", GPU floor {row['floor_percent']}%" if row.get("floor_percent") else ""
        sample = f", the first {row['windows_sampled']} windows" if row.get("windows_sampled") else ""
        lines.append(_fit(f"noderoll bench, run {index}: {row.get('nodes')} nodes, {row.get('packages', '?')} "
                          f"package(s), strategy {row.get('strategy', 'exponential')}, budget "
                          f"{budget}{floor}, jitter {row.get('jitter_percent', 0)}%{sample}"))
        for label, key, read in FIGURES:
            if row.get(key) in (None, "", [], {}):
                continue
            lines.extend(_fit(f"  {label:<40} {read(row)}").split("\n"))
    drain = report.get("drain")
    if drain:
        lines.append(_fit(f"drain of 1 node with {drain['pods']} pods: noderoll {drain['noderoll_drain_s']} s, "
                          f"kubectl ({drain['kubectl_mode']}) {drain['kubectl_drain_s']} s, ratio {drain['ratio']}"))
    return lines


def run(args: argparse.Namespace) -> int:
    """Entry point of `noderoll bench`."""
    if args.decisions:
        report = decisions.run_sizes(args, _environment(args), lambda r: _save(args, r), _log)
        print(json.dumps(report, indent=2))
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="noderoll-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    console.print(f"bench: process logs in {workdir}")
    with _stack(args) as stack:
        report = asyncio.run(_measure(args, stack, workdir))
    print("\n".join(render(report)))
    if report.get("repeats"):
        print("\n".join(render_summary(report["repeats"])))
    for row in report["results"]:
        if row.get("profile"):
            Console(width=WIDTH).print(render_profile(row))
    if args.json:
        console.print(f"bench: wrote {args.json}")
    return 0
