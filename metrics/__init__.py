"""Prometheus metrics of noderoll's two processes, defined once, and their HTTP endpoint. Does I/O (HTTP server).

A leaf: imports nothing of noderoll (only `prometheus_client`), so activities, the bridge and the
worker process can all import it without importing each other (issue 17, item 2).

Every series is named `noderoll_*` and documented in `docs/metrics.md` (a unit test keeps the two lists
equal). Activities and the CRD bridge call the small typed `record_*`/`set_*` functions below; nothing
else touches the metric objects. Workflows never import this module: they are deterministic and do no
I/O (import contract `workflows-no-io`), so rollout-level gauges (phase, batch, node counts, budget
leases) are set by the bridge from the workflows' queries (`crd_bridge/progress_metrics.py` turns
those answers into the calls below), and per-node durations by the activities that observe them.

Label values are bounded on purpose: package names, stage modes, phases, interrupt types, policy and
compartment names, object kinds. Node names are never a label (a 10,000-node fleet would explode the
series count); per-node detail lives in the node's `noderoll.io/state` annotation and in Temporal.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics import MetricWrapperBase

# Buckets in seconds. Stages range from a second (a check) to an hour (a driver build); drains from
# nothing to evict up to the drain timeout (default 10 minutes) and beyond when PDBs keep blocking.
STAGE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
DRAIN_BUCKETS = (0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)

ROLLOUT_PHASE = Gauge(
    "noderoll_rollout_phase",
    "1 for the current phase of a Package's rollout, 0 for every other phase.",
    ["package", "phase"],
)
PACKAGE_NODES = Gauge(
    "noderoll_package_nodes",
    "Target nodes of a Package by the state and stage of that package on the node.",
    ["package", "state", "stage"],
)
ROLLOUT_BATCH_NUMBER = Gauge(
    "noderoll_rollout_batch_number",
    "Number of the rollout's current batch (0 = canary or not started).",
    ["package"],
)
ROLLOUT_BATCH_SIZE = Gauge(
    "noderoll_rollout_batch_size",
    "Number of nodes in the rollout's current batch.",
    ["package"],
)
STAGE_DURATION = Histogram(
    "noderoll_stage_duration_seconds",
    "Duration of one stage on one node: its container's and its check's run in the stage pod.",
    ["package", "stage"],
    buckets=STAGE_BUCKETS,
)
STAGE_FAILURES = Counter(
    "noderoll_stage_failures_total",
    "Stages that ended with a non-zero exit code (step failure, pod failure or deadline).",
    ["package", "stage"],
)
DRAIN_DURATION = Histogram(
    "noderoll_drain_duration_seconds",
    "Duration of one node drain, by outcome (drained, timeout, blocked).",
    ["outcome"],
    buckets=DRAIN_BUCKETS,
)
EVICTION_RETRIES = Counter(
    "noderoll_eviction_retries_total",
    "Evictions refused and retried, by reason (pdb = HTTP 429 from a PodDisruptionBudget).",
    ["reason"],
)
INTERRUPTS = Counter(
    "noderoll_interrupts_total",
    "Merged interrupts performed on nodes, by interrupt type and outcome (succeeded, failed).",
    ["type", "outcome"],
)
BUDGET_LEASES_IN_USE = Gauge(
    "noderoll_budget_leases_in_use",
    "Disruption leases currently held in a DeploymentPolicy compartment's budget.",
    ["policy", "compartment"],
)
BUDGET_LIMIT = Gauge(
    "noderoll_budget_limit",
    "Size of a DeploymentPolicy compartment's disruption budget (nodes disrupted at once).",
    ["policy", "compartment"],
)
FLEET_ETA_SECONDS = Gauge(
    "noderoll_fleet_eta_seconds",
    "Seconds until a fleet's wave is estimated to end, every window succeeding (absent: no estimate).",
    ["policy"],
)
FLEET_ETA_TIMESTAMP = Gauge(
    "noderoll_fleet_eta_timestamp_seconds",
    "Unix time a fleet's wave is estimated to end (absent: no estimate).",
    ["policy"],
)
COMPARTMENT_PROGRESS = Gauge(
    "noderoll_compartment_progress_ratio",
    "Share of a fleet compartment's nodes finished in the current wave (succeeded or failed), 0 to 1.",
    ["policy", "compartment"],
)
CAPACITY_AVAILABLE = Gauge(
    "noderoll_capacity_available",
    "Units of a capacity floor's resource on Ready, uncordoned nodes in no window, in a DeploymentPolicy "
    "compartment, with the fleet's latest batch out.",
    ["policy", "compartment", "resource"],
)
CAPACITY_FLOOR = Gauge(
    "noderoll_capacity_floor",
    "A DeploymentPolicy compartment's capacity floor (budget.minAvailable) in units of its resource.",
    ["policy", "compartment", "resource"],
)
BUDGET_NODES_HELD = Gauge(
    "noderoll_budget_nodes_held",
    "Nodes a capacity floor or topology limit held back at the fleet's latest batch plan, by rule.",
    ["policy", "compartment", "rule"],
)
BRIDGE_WATCH_RESTARTS = Counter(
    "noderoll_bridge_watch_restarts_total",
    "Times the bridge restarted a Kubernetes watch (expired resourceVersion, dropped stream, error).",
    ["kind"],
)
BRIDGE_RECONCILE_ERRORS = Counter(
    "noderoll_bridge_reconcile_errors_total",
    "Bridge reconciles of one object that raised (the object is retried on the next event or resync).",
    ["kind"],
)

# Every noderoll metric, for the docs test and the dashboard test.
ALL_METRICS: tuple[MetricWrapperBase, ...] = (
    ROLLOUT_PHASE,
    PACKAGE_NODES,
    ROLLOUT_BATCH_NUMBER,
    ROLLOUT_BATCH_SIZE,
    STAGE_DURATION,
    STAGE_FAILURES,
    DRAIN_DURATION,
    EVICTION_RETRIES,
    INTERRUPTS,
    BUDGET_LEASES_IN_USE,
    BUDGET_LIMIT,
    FLEET_ETA_SECONDS,
    FLEET_ETA_TIMESTAMP,
    COMPARTMENT_PROGRESS,
    CAPACITY_AVAILABLE,
    CAPACITY_FLOOR,
    BUDGET_NODES_HELD,
    BRIDGE_WATCH_RESTARTS,
    BRIDGE_RECONCILE_ERRORS,
)

def exposed_name(metric: MetricWrapperBase) -> str:
    """The series name a scrape shows for `metric` (counters gain `_total`; histograms are the base name)."""
    described = metric.describe()[0]
    return f"{described.name}_total" if described.type == "counter" else described.name


def metric_names() -> list[str]:
    """Every exposed metric name defined here, sorted. Pure."""
    return sorted(exposed_name(m) for m in ALL_METRICS)


# --- activities (worker process) ---------------------------------------------------------------


def record_stage_duration(package: str, stage: str, seconds: float) -> None:
    """Observe how long a stage (or check, or interrupt) ran on a node."""
    STAGE_DURATION.labels(package=package, stage=stage).observe(max(0.0, seconds))


def record_stage_failure(package: str, stage: str) -> None:
    """Count a stage pod that ended Failed."""
    STAGE_FAILURES.labels(package=package, stage=stage).inc()


def record_drain(outcome: str, seconds: float) -> None:
    """Observe one drain: `outcome` is `drained`, `timeout` or `blocked`."""
    DRAIN_DURATION.labels(outcome=outcome).observe(max(0.0, seconds))


def record_eviction_retry(reason: str) -> None:
    """Count one refused eviction that will be retried: `reason` is `pdb` (HTTP 429)."""
    EVICTION_RETRIES.labels(reason=reason).inc()


def record_interrupt(interrupt_type: str, outcome: str) -> None:
    """Count one merged interrupt of `interrupt_type` (`reboot`, `service`, ...) with `outcome`."""
    INTERRUPTS.labels(type=interrupt_type, outcome=outcome).inc()


# --- bridge (from workflow queries and its own watches) -----------------------------------------


def set_rollout_phase(package: str, phase: str, all_phases: Iterable[str]) -> None:
    """Mark `phase` as the current phase of `package`'s rollout (1) and every other known phase 0.

    `all_phases` are the phases a rollout can be in (the caller's vocabulary, `api.enums.RolloutPhase`):
    the first time a package is seen each gets a series, so a graph shows every phase from the start.
    """
    with _lock:
        phases = _known_phases.setdefault(package, set(all_phases))
        phases.add(phase)
        for candidate in phases:
            ROLLOUT_PHASE.labels(package=package, phase=candidate).set(1 if candidate == phase else 0)


@dataclass(frozen=True)
class NodeCount:
    """How many of a Package's target nodes are in one (state, stage) pair."""

    state: str
    stage: str
    count: int


def set_package_nodes(package: str, counts: list[NodeCount]) -> None:
    """Replace the node counts of `package`: pairs absent from `counts` drop to 0.

    Counts of the same (state, stage) pair are summed (NodeWright overwrote them, see
    reference §5); series for pairs seen before are kept at 0 so a graph shows the drop.
    """
    totals: dict[tuple[str, str], int] = {}
    for item in counts:
        key = (item.state, item.stage)
        totals[key] = totals.get(key, 0) + item.count
    with _lock:
        previous = _known_pairs.setdefault(package, set())
        for state, stage in previous - set(totals):
            PACKAGE_NODES.labels(package=package, state=state, stage=stage).set(0)
        for (state, stage), value in totals.items():
            PACKAGE_NODES.labels(package=package, state=state, stage=stage).set(value)
        previous.update(totals)


def set_batch(package: str, number: int, size: int) -> None:
    """Publish the rollout's current batch number and size."""
    ROLLOUT_BATCH_NUMBER.labels(package=package).set(number)
    ROLLOUT_BATCH_SIZE.labels(package=package).set(size)


def set_budget(policy: str, compartment: str, in_use: int, limit: int) -> None:
    """Publish a compartment budget: leases held now and the budget size."""
    BUDGET_LEASES_IN_USE.labels(policy=policy, compartment=compartment).set(in_use)
    BUDGET_LIMIT.labels(policy=policy, compartment=compartment).set(limit)


def set_fleet_eta(policy: str, seconds_left: float | None, finish_at: float | None) -> None:
    """Publish a fleet's ETA (seconds left, finish as Unix time); None drops both series (no estimate)."""
    for gauge, value in ((FLEET_ETA_SECONDS, seconds_left), (FLEET_ETA_TIMESTAMP, finish_at)):
        if value is None:
            try:
                gauge.remove(policy)
            except KeyError:
                pass  # never set
        else:
            gauge.labels(policy=policy).set(value)


def set_compartment_progress(policy: str, compartment: str, ratio: float) -> None:
    """Publish the finished share of a compartment's nodes in the fleet's wave."""
    COMPARTMENT_PROGRESS.labels(policy=policy, compartment=compartment).set(ratio)


def set_capacity(policy: str, compartment: str, resource: str, available: int, floor: int) -> None:
    """Publish a capacity floor: units available with the latest batch out, and the floor."""
    CAPACITY_AVAILABLE.labels(policy=policy, compartment=compartment, resource=resource).set(available)
    CAPACITY_FLOOR.labels(policy=policy, compartment=compartment, resource=resource).set(floor)


def set_nodes_held(policy: str, held: dict[tuple[str, str], int]) -> None:
    """Replace the nodes held back per (compartment, rule) of `policy`'s fleet: pairs seen before and
    absent now drop to 0."""
    with _lock:
        previous = _known_held.setdefault(policy, set())
        for compartment, rule in previous - set(held):
            BUDGET_NODES_HELD.labels(policy=policy, compartment=compartment, rule=rule).set(0)
        for (compartment, rule), value in held.items():
            BUDGET_NODES_HELD.labels(policy=policy, compartment=compartment, rule=rule).set(value)
        previous.update(held)


def record_watch_restart(kind: str) -> None:
    """Count one restart of the bridge's watch on `kind` (`Package`, `DeploymentPolicy`, `Node`)."""
    BRIDGE_WATCH_RESTARTS.labels(kind=kind).inc()


def record_reconcile_error(kind: str) -> None:
    """Count one failed reconcile of an object of `kind`."""
    BRIDGE_RECONCILE_ERRORS.labels(kind=kind).inc()


def forget_package(package: str) -> None:
    """Drop every per-package series of a deleted Package (histograms/counters keep their history)."""
    with _lock:
        for state, stage in _known_pairs.pop(package, set()):
            PACKAGE_NODES.remove(package, state, stage)
        for phase in _known_phases.pop(package, set()):
            ROLLOUT_PHASE.remove(package, phase)
    for gauge in (ROLLOUT_BATCH_NUMBER, ROLLOUT_BATCH_SIZE):
        try:
            gauge.remove(package)
        except KeyError:
            pass  # never set for this package


# --- the endpoint --------------------------------------------------------------------------------

_lock = threading.Lock()
# Label sets set per package, so a deleted Package's series can be removed (and dropped pairs zeroed).
_known_pairs: dict[str, set[tuple[str, str]]] = {}
_known_phases: dict[str, set[str]] = {}
# (compartment, rule) pairs of nodes held back, per policy (dropped pairs go to 0).
_known_held: dict[str, set[tuple[str, str]]] = {}
_servers: list[ThreadingHTTPServer] = []


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> int:
    """Serve `/metrics` (default registry: noderoll series plus process/GC) on `port`; 0 picks a free port.

    Returns the bound port. The server runs in a daemon thread until `stop_metrics_servers()` or exit.
    """
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    with _lock:
        _servers.append(server)
    return int(server.server_port)


def stop_metrics_servers() -> None:
    """Stop every endpoint started by this process (tests, the demo)."""
    with _lock:
        servers = list(_servers)
        _servers.clear()
    for server in servers:
        server.shutdown()
        server.server_close()
