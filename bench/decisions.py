"""The fleet's decisions at scale, in process (issue 45): what the fleet workflow computes per window, and the
payloads and status objects it makes, as the fleet grows. Pure but for the clock (CPU time) and an alarm.

`noderoll bench --decisions --nodes 200 1000 5000 10000` runs, per size, the fleet's own machine
(`planning.fleet.machine`, what `fleet/<policy>` runs) on a simulated fleet of that many fresh nodes
(`planning.views.simulate` over `planning.views.worlds.SnapshotWorld`: listings classify the nodes with the
real target selection, reads answer from them, every window succeeds) under the scale scenario
(`bench.scenario`: two Packages, exponential, a count budget, a GPU floor) for the first `windows` windows of
the wave, and measures:

* CPU seconds per window of the machine itself (its steps, without the simulated world's listings and reads,
  which the worker's activities do) and of the listings and reads apart;
* per `progress` answer (what the query computes once per workflow task: the ETA, the report): CPU seconds
  and its payload, at a few points of the sample; the details line;
* the payloads the fleet's history would hold: the carry-over of continue-as-new, a listing's result, a
  fresh read's input and result, a `request_windows` chunk, a window request, a window result;
* the status objects the bridge would write (a Package's, the policy's), also with 1,000 nodes erroring;
* `noderoll plan` of the whole wave (its simulation; the CLI adds reading the Nodes).

Each measurement has a time budget (`--decisions-budget`, seconds): one that does not finish is recorded as
not finished within it. CPU time is the process's; it is the same work on a quieter or busier machine, but a
slower host gives more of it (docs/benchmarks.md, "How to read this").
"""

from __future__ import annotations

import copy
import cProfile
import json
import pstats
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from api.enums import State
from bench.scenario import GPU_RESOURCE, RUN_LABEL, Scenario, package_manifests, policy_manifest
from fleetsim.nodes import node_name
from planning.fleet.codec import state_to_json
from planning.fleet.messages import Desired
from planning.fleet.run import FleetRun
from planning.node.targets import NodeView
from planning.rollout.fleet_state import NodeRecord
from planning.rollout.work_index import touch_all
from planning.views import fleet_status
from planning.views.eta import Timings
from planning.views.fleet_eta import fleet_eta
from planning.views.rollout_plan import PlanInput, plan_fleet
from planning.views.simulate import simulate
from planning.views.status import render_package_status, render_policy_status
from planning.views.worlds import SnapshotWorld
from protocol.activities import (
    ListFleetNodesInput,
    ListFleetNodesResult,
    ReadNodeSupplyInput,
    ReadNodeSupplyResult,
    RequestWindowsInput,
)
from protocol.fleet import FleetInput, FleetSpec, PackageEntry, WindowRequest, WindowResult
from service.data_converter import data_converter

T = TypeVar("T")
# The chunk of requests one `request_windows` activity carries (workflows/fleet_commands.py).
REQUEST_CHUNK = 50
# `progress` is measured after these shares of the sample's windows.
PROBE_AT = (0.1, 0.5, 0.9)
# The simulated windows take what the bench's measured (a two-Package reboot window: 45 s critical path and
# about 10 s of overhead) and its batches' gaps: the fleet's listings and re-listings come as often as in a run.
WINDOW_SECONDS = 55.0
GAP_SECONDS = 3.0
# A failed stage's message as a node window reports it (workflows/node_pods.py).
ERROR_MESSAGE = "apply failed after 3 attempts (exit code 1)"
ERRORING_NODES = 1000
START = datetime(2026, 1, 1, tzinfo=UTC)


class OverBudget(Exception):
    """A measurement ran past its time budget."""


class SampleDone(Exception):
    """The sample's windows were handed out and answered: the simulation stops here."""


@contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Raise `OverBudget` in the block after `seconds` of wall time (SIGALRM; main thread only)."""
    def expired(_signum: int, _frame: object) -> None:
        raise OverBudget(f"not finished within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def payload_bytes(value: object) -> int:
    """`value`'s size as a Temporal payload (the data converter's JSON, as the history holds it)."""
    return sum(p.ByteSize() for p in data_converter.payload_converter.to_payloads([value]))


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """`fn()` and the CPU seconds it took."""
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def synthetic_nodes(sc: Scenario) -> list[NodeView]:
    """The scenario's nodes as fleetsim registers them (fresh: nothing recorded), Ready, 8 GPUs each."""
    labels = {RUN_LABEL: sc.name, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
              "topology.kubernetes.io/zone": "zone-a", "fleetsim.noderoll.io/simulated": "true"}
    return [NodeView(name=node_name(sc.name, i, sc.nodes), labels={**labels, "kubernetes.io/hostname": f"h{i}"},
                     ready=True, allocatable={GPU_RESOURCE: "8"}) for i in range(sc.nodes)]


def fleet_spec(sc: Scenario) -> FleetSpec:
    """The desired state the bridge would hand the scenario's fleet."""
    return FleetSpec(sc.name, policy_manifest(sc)["spec"], 1,
                     [PackageEntry(m["metadata"]["name"], m["spec"], 1, uid=f"uid-{i}")
                      for i, m in enumerate(package_manifests(sc))])


@dataclass
class Meter:
    """What the measured world saw: CPU in listings and reads, the largest of each payload, the windows."""

    world_cpu: float = 0.0
    probe_cpu: float = 0.0
    listings: int = 0
    reads: int = 0
    opened: int = 0
    closed: int = 0
    largest: dict[str, int] = field(default_factory=dict)
    probes: list[dict[str, Any]] = field(default_factory=list)

    def note(self, kind: str, value: object) -> None:
        self.largest[kind] = max(self.largest.get(kind, 0), payload_bytes(value))


class MeasuredWorld(SnapshotWorld):
    """`SnapshotWorld` that times itself, keeps the payload sizes, probes `progress` and stops the sample."""

    def __init__(self, nodes: list[NodeView], windows: int, probe: Callable[[], None]) -> None:
        super().__init__(nodes, Timings(windows={"reboot": [WINDOW_SECONDS]}, gaps=[GAP_SECONDS]))
        self.meter = Meter()
        self.sample = windows
        self.probe = probe
        self.probe_after = sorted({max(1, int(windows * share)) for share in PROBE_AT})
        # The latest requests handed out, as one `request_windows` chunk would carry them.
        self.recent: list[tuple[str, WindowRequest]] = []

    def listing(self, input: ListFleetNodesInput) -> ListFleetNodesResult:
        result, cpu = timed(lambda: super(MeasuredWorld, self).listing(input))
        self.meter.world_cpu += cpu
        self.meter.listings += 1
        self.meter.note("activity list_fleet_nodes result", result)
        return result

    def read(self, input: ReadNodeSupplyInput) -> ReadNodeSupplyResult:
        result, cpu = timed(lambda: super(MeasuredWorld, self).read(input))
        self.meter.world_cpu += cpu
        self.meter.reads += 1
        self.meter.note("activity read_node_supply input", input)
        self.meter.note("activity read_node_supply result", result)
        return result

    def open_window(self, node: str, request: WindowRequest) -> tuple[float, WindowResult]:
        if self.meter.opened >= self.sample:
            raise SampleDone
        (seconds, result), cpu = timed(lambda: super(MeasuredWorld, self).open_window(node, request))
        self.meter.world_cpu += cpu
        self.meter.opened += 1
        self.meter.note("window request (signal window)", request)
        self.recent = [*self.recent, (node, request)][-REQUEST_CHUNK:]
        self.meter.note("signal window_result", result)
        return seconds, result

    def close_window(self, node: str, result: WindowResult) -> None:
        _, cpu = timed(lambda: super(MeasuredWorld, self).close_window(node, result))
        self.meter.world_cpu += cpu
        self.meter.closed += 1
        if self.probe_after and self.meter.closed >= self.probe_after[0]:
            self.probe_after.pop(0)
            _, spent = timed(self.probe)
            self.meter.probe_cpu += spent
        if self.meter.closed >= self.sample:
            raise SampleDone


def progress_probe(run: FleetRun, meter: Meter, seconds: float) -> Callable[[], None]:
    """What the fleet's `progress` query computes now (the ETA, then the report), timed and sized."""
    def probe() -> None:
        found: dict[str, Any] = {"windows_closed": meter.closed}
        try:
            with budget(seconds):
                eta, found["eta_cpu_s"] = timed(lambda: fleet_eta(run) if fleet_status.has_eta(run.phase) else None)
                report, found["report_cpu_s"] = timed(lambda: fleet_status.fleet_progress(
                    run.state, run.phase, run.stamp(), run.fleet_id, eta))
                _, found["details_line_cpu_s"] = timed(lambda: fleet_status.details_line(
                    run.state, run.phase, run.fleet_id))
        except OverBudget as err:
            found["not_finished"] = str(err)
            meter.probes.append(found)
            return
        found["answer_bytes"] = payload_bytes(report)
        meter.largest["progress query answer"] = max(meter.largest.get("progress query answer", 0),
                                                     found["answer_bytes"])
        meter.probes.append(found)
    return probe


def status_sizes(run: FleetRun) -> dict[str, int]:
    """The Package and policy status objects (JSON bytes) the bridge would write now, and with ERRORING_NODES
    nodes erroring (their records set so, as a window that failed a stage answers)."""
    def sizes(state: Any, suffix: str) -> dict[str, int]:
        report = fleet_status.fleet_progress(state, run.phase, run.stamp(), run.fleet_id)
        found = {f"Package{suffix}": max((len(json.dumps(render_package_status(p, p.generation)))
                                          for p in report.packages.values()), default=0)}
        found[f"DeploymentPolicy{suffix}"] = len(json.dumps(render_policy_status([], 1, run.stamp(), None, report)))
        return found

    erroring = copy.deepcopy(run.state)
    for node in sorted(erroring.targets)[:ERRORING_NODES]:
        packages = erroring.targets[node].packages()
        erroring.in_flight.pop(node, None)
        erroring.records[node] = NodeRecord({p: State.ERRORING.value for p in packages},
                                            dict.fromkeys(packages, ERROR_MESSAGE))
    touch_all(erroring)  # the records changed by hand: the fleet's views recompute every node
    return {**sizes(run.state, ""), **sizes(erroring, f" with {ERRORING_NODES} erroring")}


def measure_size(sc: Scenario, windows: int, seconds: float, profile: bool = False) -> dict[str, Any]:
    """The decisions of one fleet size (module docstring)."""
    nodes = synthetic_nodes(sc)
    spec = fleet_spec(sc)
    row: dict[str, Any] = {"nodes": sc.nodes, "windows_sampled": windows}
    run = FleetRun(input=FleetInput(policy_name=sc.name))
    run.receive(Desired(spec))
    world = MeasuredWorld(nodes, windows, lambda: None)
    world.probe = progress_probe(run, world.meter, seconds)
    profiler = cProfile.Profile() if profile else None
    started = time.process_time()
    try:
        with budget(seconds * 4):
            if profiler is not None:
                profiler.enable()
            simulate(run, world, START)
    except SampleDone:
        pass
    except OverBudget as err:
        row["not_finished"] = str(err)
    finally:
        if profiler is not None:
            profiler.disable()
    total = time.process_time() - started
    meter = world.meter
    machine = total - meter.world_cpu - meter.probe_cpu
    row.update({
        "windows": meter.closed, "listings": meter.listings, "reads": meter.reads,
        "machine_cpu_s": round(machine, 3),
        "machine_cpu_s_per_window": round(machine / max(1, meter.closed), 5),
        "world_cpu_s_per_window": round(meter.world_cpu / max(1, meter.closed), 5),
        "progress": meter.probes,
    })
    meter.note(f"activity request_windows input ({len(world.recent)} requests)",
               RequestWindowsInput([r for _, r in world.recent], [n for n, _ in world.recent]))
    meter.note("carry-over (continue-as-new input)", run.carry_over())
    meter.largest["carry-over state JSON"] = len(json.dumps(state_to_json(run.state), separators=(",", ":")))
    row["largest_payload_bytes"] = dict(sorted(meter.largest.items()))
    row["status_object_bytes"] = status_sizes(run)
    row["plan"] = _plan(sc, nodes, spec, seconds)
    if profiler is not None:
        row["profile_top"] = _top(profiler)
    return row


def _plan(sc: Scenario, nodes: list[NodeView], spec: FleetSpec, seconds: float) -> dict[str, Any]:
    """`noderoll plan` of the whole wave (its simulation), timed."""
    try:
        with budget(seconds):
            plan, cpu = timed(lambda: plan_fleet(PlanInput(spec, nodes, START.isoformat())))
    except OverBudget as err:
        return {"not_finished": str(err)}
    return {"cpu_s": round(cpu, 2), "windows": plan.totals.windows, "batches": plan.totals.batches}


def _top(profiler: cProfile.Profile, lines: int = 15) -> list[str]:
    """The profile's functions by cumulative time, as `cumulative_s function` lines."""
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])  # type: ignore[attr-defined]
    return [f"{value[3]:.3f} {key[0].rsplit('/', 2)[-1]}:{key[1]}({key[2]})" for key, value in rows[:lines]]


def per_node_bytes(rows: list[dict[str, Any]], kind: str) -> float | None:
    """The slope of a payload's size over the fleet size between the smallest and the largest run. Pure."""
    found = [(r["nodes"], r["largest_payload_bytes"].get(kind)) for r in rows if r["largest_payload_bytes"].get(kind)]
    if len(found) < 2:
        return None
    (n1, b1), (n2, b2) = min(found), max(found)
    return round((b2 - b1) / (n2 - n1), 1) if n2 != n1 else None


def run_sizes(args: Any, environment: dict[str, Any], save: Callable[[dict[str, Any]], None],
              log: Callable[[str], None]) -> dict[str, Any]:
    """`noderoll bench --decisions`: every size of `args.nodes` in turn (module docstring), saved after each."""
    report: dict[str, Any] = {"decisions": [], "environment": environment}
    for size in args.nodes:
        sc = Scenario(f"bench{size}", size, args.stage_seconds, args.reboot_seconds, packages=args.packages,
                      strategy=args.strategy, budget_percent=args.budget_percent, initial_batch=args.initial_batch,
                      delta=args.delta, budget_count=args.budget_count, floor_percent=args.floor_percent)
        log(f"decisions: {size} nodes")
        row = measure_size(sc, min(size, args.windows or size), args.decisions_budget, args.decisions_profile)
        log(json.dumps(row))
        report["decisions"].append(row)
        save(report)
    rows = report["decisions"]
    report["per_node_bytes"] = {kind: per_node_bytes(rows, kind)
                                for kind in sorted({k for r in rows for k in r["largest_payload_bytes"]})}
    save(report)
    return report
