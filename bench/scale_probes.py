"""What a scale run (issue 45) measures beside the bench's figures: the fleet's runs and workflow-task
latency, the largest payload of each kind, the status objects' and `progress` answers' sizes, and how long
`noderoll status` and `noderoll plan` take (bench/cli_timing.py). `scale_figures` is pure; the timings start
processes.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench import cli_timing, fleet_history, histories
from bench.sample import StatusSizes, count_runs
from bench.scenario import Scenario, package_manifests

# fleetsim's Lease renewal period: 60 s, and 240 s above LARGE_FLEET nodes (10,000 nodes renewing every 60 s
# are 167 writes a second; the local stack's node lifecycle controller waits 300 s for a renewal).
SIM_HEARTBEAT_SECONDS = 60.0
LARGE_SIM_HEARTBEAT_SECONDS = 240.0
LARGE_FLEET = 2000
# `noderoll status` is timed this many times once half the run's windows began (polling visibility this often).
STATUS_PROBES = 3
STATUS_PROBE_POLL_SECONDS = 5.0


@dataclass
class ProgressSizes:
    """The `progress` answers' sizes (the query's payload, bytes), and the queries that failed."""

    largest: int = 0
    failures: int = 0
    last_error: str = ""


def fleet_history_counts(runs: list[list[Any]]) -> histories.FleetHistory:
    """The fleet's history counts over its runs (`histories.fleet_history` of them one after the other)."""
    return histories.fleet_history([e for run in runs for e in run])


@dataclass(frozen=True)
class Probes:
    """What a run measured from outside: status objects' and `progress` answers' sizes, CLI timings."""

    sizes: StatusSizes
    answers: ProgressSizes
    statuses: list[dict[str, Any]]
    plan: dict[str, Any]


def scale_figures(runs: list[list[Any]], windows: list[histories.WindowStats], probes: Probes) -> dict[str, Any]:
    """What issue 45 records beside the bench's figures: the fleet's runs and workflow-task latency, the
    largest payload of each kind, the status objects' sizes, `noderoll status` and `plan` times. Pure."""
    sizes, answers, statuses, plan = probes.sizes, probes.answers, probes.statuses, probes.plan
    summary = fleet_history.runs_summary(runs)
    payloads = fleet_history.largest_payloads(runs)
    payloads.note("window request (signal window)", max((w.request_bytes for w in windows), default=0))
    payloads.note("progress query answer", answers.largest)
    times = [s["seconds"] for s in statuses if s.get("exit_code") == 0]
    return {
        "fleet_runs": summary.runs,
        "fleet_continue_as_new": summary.continue_as_new,
        "fleet_events_per_run": summary.events_per_run,
        "fleet_largest_history_bytes": summary.largest_history_bytes,
        "fleet_workflow_task_latency_s": asdict(fleet_history.task_latency(runs)),
        "largest_payload_bytes": dict(sorted(payloads.largest.items())),
        "largest_payload_any_bytes": max(payloads.largest.values(), default=0),
        "status_object_bytes": dict(sizes.largest),
        "progress_query_failures": answers.failures,
        "progress_query_last_error": answers.last_error,
        "noderoll_status": statuses,
        "noderoll_status_median_s": statistics.median(times) if times else None,
        "noderoll_plan": plan,
    }


def time_plan(workdir: Path, sc: Scenario, connection: list[str], timeout: float) -> dict[str, Any]:
    """`noderoll plan -f <the scenario's Packages> --fleet <name>`: the whole wave, before it starts."""
    manifests = workdir / f"{sc.name}-packages.json"
    manifests.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": package_manifests(sc)}))
    return asdict(cli_timing.time_cli(["plan", "-f", str(manifests), "--fleet", sc.name, "-o", "json"], connection,
                                      timeout))


async def time_status(temporal: Client, task_queue: str, sc: Scenario, connection: list[str],
                       found: list[dict[str, Any]]) -> None:
    """`noderoll status --fleet <name>` three times once half the run's windows began (while they run)."""
    half = max(1, (sc.windows or sc.nodes) // 2)
    while await count_runs(temporal, task_queue) < half:
        await asyncio.sleep(STATUS_PROBE_POLL_SECONDS)
    for _ in range(STATUS_PROBES):
        found.append(await asyncio.to_thread(cli_timing.status_run, sc.name, connection))


def register_scale_flags(p: Any) -> None:
    """The flags of the scale scenario and of `--decisions` (`noderoll bench`)."""
    p.add_argument("--budget-count", type=int,
                   help="a count budget instead of --budget-percent: the same windows at once at every size (issue 45)")
    p.add_argument("--floor-percent", type=int,
                   help="a capacity floor: minAvailable of nvidia.com/gpu in percent (every hand-out reads the nodes)")
    p.add_argument("--windows", type=int,
                   help="sample the wave: halt the fleet once this many windows began, measure those (issue 45)")
    p.add_argument("--sim-heartbeat-seconds", type=float,
                   help="fleetsim's Lease renewal period per node (default 60, 240 above 2,000 nodes: the node "
                        "lifecycle controller's grace is 300 s)")
    p.add_argument("--plan-timeout", type=float, default=900.0,
                   help="seconds `noderoll plan` of the wave may take before it is recorded as not finished")
    p.add_argument("--deadline-minutes", type=float, default=0.0,
                   help="halt the fleet this many minutes after the Packages' creation and measure what ran "
                        "(a fleet that does not get there: issue 45's before-runs; 0: no deadline)")
    p.add_argument("--decisions", action="store_true",
                   help="no stack: run the fleet's decisions in process per size (bench/decisions.py, issue 45)")
    p.add_argument("--decisions-budget", type=float, default=300.0,
                   help="--decisions: seconds each measurement may take before it is recorded as not finished")
    p.add_argument("--decisions-profile", action="store_true", help="--decisions: the machine's top functions")


def _join(row: dict[str, Any], keys: tuple[str, ...]) -> str:
    return " / ".join("?" if row.get(k) is None else str(row.get(k)) for k in keys)


# The scale run's figures in `noderoll bench`'s output (bench/command.py FIGURES: label, key, how to read).
SCALE_FIGURES: tuple[tuple[str, str, Any], ...] = (
    ("CPU s per window: noderoll (worker + bridge) / all", "noderoll_cpu_seconds_per_window",
     lambda r: _join(r, ("noderoll_cpu_seconds_per_window", "all_cpu_seconds_per_window"))),
    ("fleet runs / continue-as-new / events per run", "fleet_runs",
     lambda r: f"{r['fleet_runs']} / {r['fleet_continue_as_new']} / {r['fleet_events_per_run']}"),
    ("fleet workflow task p50 / p95 (s; queued, running)", "fleet_workflow_task_latency_s", lambda r: (
        "{total_p50_s} / {total_p95_s} ({queued_p50_s}/{queued_p95_s}, {running_p50_s}/{running_p95_s})"
        .format(**r["fleet_workflow_task_latency_s"]))),
    ("largest payload (bytes) by kind", "largest_payload_bytes",
     lambda r: ", ".join(f"{k} {v}" for k, v in r["largest_payload_bytes"].items())),
    ("status object bytes (largest)", "status_object_bytes",
     lambda r: ", ".join(f"{k} {v}" for k, v in r["status_object_bytes"].items())),
    ("progress queries failed", "progress_query_failures", lambda r: r["progress_query_failures"]),
    ("noderoll status s (while running)", "noderoll_status",
     lambda r: " ".join(f"{s['seconds']}({s['exit_code']})" for s in r["noderoll_status"])),
    ("noderoll status s (windows ended)", "noderoll_status_after",
     lambda r: " ".join(f"{s['seconds']}({s['exit_code']})" for s in r["noderoll_status_after"])),
    ("stopped at the run's deadline", "stopped_at_deadline", lambda r: r["stopped_at_deadline"]),
    ("noderoll plan of the wave s (exit)", "noderoll_plan",
     lambda r: f"{r['noderoll_plan']['seconds']} ({r['noderoll_plan']['exit_code']})"),
    ("ETA error after batch 1", "eta_first_batch_error", lambda r: r["eta_first_batch_error"]),
)
