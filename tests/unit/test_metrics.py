"""The metric definitions, their docs page and the Grafana dashboard agree; the recording helpers work."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import metrics
from api.enums import RolloutPhase
from crd_bridge import progress_metrics

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"
DASHBOARD = ROOT / "deploy" / "grafana" / "noderoll-dashboard.json"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def documented_names() -> list[str]:
    """Names in the first column of the docs' series table."""
    return sorted(set(re.findall(r"^\| `(noderoll_[a-z_]+)` \|", DOC.read_text(), flags=re.MULTILINE)))


def dashboard_exprs() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in data["panels"] for t in panel.get("targets", [])]
    exprs += [v["definition"] for v in data["templating"]["list"] if v.get("definition")]
    return exprs


def test_every_metric_is_prefixed_and_documented_once() -> None:
    names = metrics.metric_names()
    assert all(n.startswith("noderoll_") for n in names)
    assert documented_names() == names


def test_docs_state_type_of_each_metric() -> None:
    text = DOC.read_text()
    for metric in metrics.ALL_METRICS:
        kind = metric.describe()[0].type
        assert re.search(rf"^\| `{metrics.exposed_name(metric)}` \| {kind} \|", text, flags=re.MULTILINE), kind


def test_dashboard_queries_use_only_defined_metrics() -> None:
    defined = set(metrics.metric_names())
    allowed = defined | {f"{n}{s}" for n in defined for s in HISTOGRAM_SUFFIXES}
    exprs = dashboard_exprs()
    assert exprs
    used: set[str] = set()
    for expr in exprs:
        found = set(re.findall(r"noderoll_[a-z_]+", expr))
        assert found, f"query uses no noderoll metric: {expr}"
        assert found <= allowed, f"unknown series in {expr!r}: {found - allowed}"
        used |= {n for n in defined if any(f == n or f.startswith(n + "_") for f in found)}
    # Every metric has at least one panel.
    assert used == defined


def test_dashboard_is_a_grafana_dashboard() -> None:
    data = json.loads(DASHBOARD.read_text())
    assert data["uid"] and data["title"] and isinstance(data["schemaVersion"], int)
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    for panel in data["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


def sample(name: str, labels: dict[str, str]) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_package_nodes_sums_pairs_and_zeroes_dropped_pairs() -> None:
    pkg = "unit-nodes"
    metrics.set_package_nodes(
        pkg,
        [
            metrics.NodeCount("complete", "config", 2),
            metrics.NodeCount("complete", "config", 3),
            metrics.NodeCount("in_progress", "apply", 1),
        ],
    )
    assert sample("noderoll_package_nodes", {"package": pkg, "state": "complete", "stage": "config"}) == 5
    metrics.set_package_nodes(pkg, [metrics.NodeCount("complete", "config", 6)])
    assert sample("noderoll_package_nodes", {"package": pkg, "state": "in_progress", "stage": "apply"}) == 0
    metrics.forget_package(pkg)
    assert sample("noderoll_package_nodes", {"package": pkg, "state": "complete", "stage": "config"}) is None


def test_rollout_phase_is_one_hot() -> None:
    pkg = "unit-phase"
    progress_metrics.set_rollout_phase(pkg, "Canary")
    progress_metrics.set_rollout_phase(pkg, "Progressing")
    assert sample("noderoll_rollout_phase", {"package": pkg, "phase": "Progressing"}) == 1
    assert sample("noderoll_rollout_phase", {"package": pkg, "phase": "Canary"}) == 0
    metrics.set_batch(pkg, 3, 8)
    metrics.forget_package(pkg)
    assert sample("noderoll_rollout_phase", {"package": pkg, "phase": "Progressing"}) is None
    assert sample("noderoll_rollout_batch_size", {"package": pkg}) is None


@pytest.mark.parametrize(
    ("record", "name", "labels"),
    [
        pytest.param(lambda: metrics.record_stage_failure("unit-c", "apply"), "noderoll_stage_failures_total",
                     {"package": "unit-c", "stage": "apply"}, id="stage-failure"),
        pytest.param(lambda: metrics.record_eviction_retry("pdb"), "noderoll_eviction_retries_total",
                     {"reason": "pdb"}, id="eviction-retry"),
        pytest.param(lambda: metrics.record_interrupt("reboot", "succeeded"), "noderoll_interrupts_total",
                     {"type": "reboot", "outcome": "succeeded"}, id="interrupt"),
        pytest.param(lambda: metrics.record_watch_restart("Node"), "noderoll_bridge_watch_restarts_total",
                     {"kind": "Node"}, id="watch-restart"),
        pytest.param(lambda: metrics.record_reconcile_error("Package"), "noderoll_bridge_reconcile_errors_total",
                     {"kind": "Package"}, id="reconcile-error"),
        pytest.param(lambda: metrics.record_stage_duration("unit-c", "apply", 12.0),
                     "noderoll_stage_duration_seconds_count", {"package": "unit-c", "stage": "apply"}, id="stage"),
        pytest.param(lambda: metrics.record_drain("timeout", 600.0), "noderoll_drain_duration_seconds_count",
                     {"outcome": "timeout"}, id="drain"),
    ],
)
def test_recorders_count_once(record, name: str, labels: dict[str, str]) -> None:
    before = sample(name, labels) or 0.0
    record()
    assert sample(name, labels) == before + 1


def test_endpoint_serves_the_series_on_a_free_port() -> None:
    metrics.set_budget("unit-policy", "gpu", 2, 4)
    port = metrics.start_metrics_server(0, addr="127.0.0.1")
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert 'noderoll_budget_leases_in_use{compartment="gpu",policy="unit-policy"} 2.0' in body
        assert 'noderoll_budget_limit{compartment="gpu",policy="unit-policy"} 4.0' in body
    finally:
        metrics.stop_metrics_servers()


def test_node_counts_from_state_annotations() -> None:
    pkg = "unit-annot"
    done = json.dumps({"packages": {pkg: {"version": "1.0.0", "stage": "config", "state": "complete"}}})
    busy = json.dumps({"packages": {pkg: {"version": "1.0.0", "stage": "apply", "state": "in_progress"},
                                    "other": {"version": "2.0.0", "stage": "apply", "state": "erroring"}}})
    counts = progress_metrics.node_counts(pkg, [done, done, busy, None, "{garbage"])
    assert counts == [
        metrics.NodeCount("blocked", "none", 1),  # unreadable: the node is held
        metrics.NodeCount("complete", "config", 2),
        metrics.NodeCount("in_progress", "apply", 1),
        metrics.NodeCount("waiting", "none", 1),
    ]


def test_publish_progress_and_budget_from_query_answers() -> None:
    from planning.views.fleet_status import BudgetUse, FleetProgress
    from planning.views.status import RolloutProgress

    pkg = "unit-progress"
    progress_metrics.publish_progress(pkg, RolloutProgress(phase=RolloutPhase.PROGRESSING, batch_number=2, batch_size=4))
    assert sample("noderoll_rollout_phase", {"package": pkg, "phase": "Progressing"}) == 1
    assert sample("noderoll_rollout_batch_size", {"package": pkg}) == 4
    progress_metrics.publish_fleet("unit-pol", FleetProgress(budgets={"default": BudgetUse(limit=3, in_use=1)}))
    assert sample("noderoll_budget_limit", {"policy": "unit-pol", "compartment": "default"}) == 3
    metrics.forget_package(pkg)


def test_publish_fleet_gpu_floors_and_nodes_held() -> None:
    from planning.rollout.disruption import CapacityUse, WaitNote
    from planning.views.fleet_status import FleetProgress

    held = FleetProgress(capacity=[CapacityUse("h100", "nvidia.com/gpu", 1800, 1795, 1840)],
                         waits=[WaitNote("h100", "floor", 3, "..."), WaitNote("h100", "topology", 2, "...")])
    progress_metrics.publish_fleet("unit-gpu", held)
    labels = {"policy": "unit-gpu", "compartment": "h100", "resource": "nvidia.com/gpu"}
    assert sample("noderoll_capacity_available", labels) == 1800
    assert sample("noderoll_capacity_floor", labels) == 1795
    assert sample("noderoll_budget_nodes_held", {"policy": "unit-gpu", "compartment": "h100", "rule": "floor"}) == 3
    progress_metrics.publish_fleet("unit-gpu", FleetProgress(waits=[WaitNote("h100", "floor", 1, "...")]))
    assert sample("noderoll_budget_nodes_held", {"policy": "unit-gpu", "compartment": "h100", "rule": "floor"}) == 1
    # A rule that holds nothing any more drops to 0 (the series stays, so a graph shows the drop).
    assert sample("noderoll_budget_nodes_held", {"policy": "unit-gpu", "compartment": "h100", "rule": "topology"}) == 0
