"""Pure parts of `noderoll bench`: metric parsing, request classification, ideal makespan, summaries."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import apimetrics
from bench.command import render_summary, repeat_summary
from bench.histories import WindowStats, batches_from_sends, histogram, histogram_text, per_node, percentile
from bench.reqcount import classify
from bench.rollout import disruptions, splits_of
from bench.scenario import Scenario, batch_sizes, ideal_makespan, node_critical_path, package_manifests
from planning.fleet_status import FleetProgress, NodeProgress

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",scope="namespace",subresource="",verb="POST",version="v1"} 2e+00
apiserver_request_duration_seconds_count{resource="nodes",verb="PATCH"} 99
"""


def test_request_totals_sum_codes_and_keep_subresources() -> None:
    totals = apimetrics.parse_request_totals(METRICS)
    assert totals == Counter({("PATCH", "nodes"): 8, ("PATCH", "nodes/status"): 3, ("POST", "jobs"): 2})


def test_delta_and_per_window() -> None:
    before = Counter({("PATCH", "nodes"): 5, ("GET", "pods"): 4})
    after = Counter({("PATCH", "nodes"): 9, ("GET", "pods"): 4, ("POST", "jobs"): 6})
    delta = apimetrics.delta(before, after)
    assert delta == Counter({("POST", "jobs"): 6, ("PATCH", "nodes"): 4})
    assert apimetrics.per_window(delta, 2) == {"POST jobs": 3.0, "PATCH nodes": 2.0}


@pytest.mark.parametrize(("method", "url", "expected"), [
    ("GET", "/api/v1/nodes/n1", "get nodes"),
    ("GET", "/api/v1/nodes?labelSelector=a%3Db", "list nodes"),
    ("PATCH", "/api/v1/nodes/n1/status", "patch nodes/status"),
    ("GET", "/api/v1/namespaces/x/pods?watch=true", "watch pods"),
    ("POST", "/api/v1/namespaces/ns/pods/p/eviction", "create pods/eviction"),
    ("POST", "/apis/batch/v1/namespaces/noderoll-system/jobs", "create jobs"),
    ("PATCH", "/apis/noderoll.io/v1alpha1/packages/p/status", "patch packages/status"),
    ("GET", "/api/v1/namespaces/ns", "get namespaces"),
    ("DELETE", "/api/v1/namespaces/ns/pods", "deletecollection pods"),
    ("GET", "/apis/policy/v1", None),
    ("GET", "/metrics", None),
])
def test_client_requests_are_classified_like_the_apiserver(method: str, url: str, expected: str | None) -> None:
    assert classify(method, url) == expected


def test_ideal_makespan_of_the_issue_scenario() -> None:
    names = [f"n-{i:03d}" for i in range(200)]
    sc = Scenario("b", 200)
    assert node_critical_path(sc) == 30.0  # apply, config, post-interrupt at 5 s + a 15 s reboot
    assert batch_sizes(sc, names) == [1, 2, 4, 8, 16, 32, 50, 50, 37]
    assert ideal_makespan(sc, names) == 9 * 30.0


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([], 95) == 0.0


def test_batches_are_recovered_from_the_rollouts_hand_overs() -> None:
    sends = [(0.0, ["a"]), (31.0, ["b", "c"]), (31.2, ["d"]), (40.0, ["c"]), (70.0, ["e", "f"])]
    # "c" re-sent at 40 s counts once; b, c, d were one batch sent in two chunks.
    assert batches_from_sends(sends) == [1, 3, 2]
    assert batches_from_sends([]) == []


def test_two_package_scenario_depends_in_order_and_shares_one_window() -> None:
    sc = Scenario("b", 50, packages=2)
    first, second = package_manifests(sc)
    assert [first["metadata"]["name"], second["metadata"]["name"]] == ["b", "b-2"] == sc.package_names
    assert "dependsOn" not in first["spec"] and second["spec"]["dependsOn"] == {"b": "1.0.0"}
    assert first["spec"]["interrupt"] == second["spec"]["interrupt"] == {"type": "reboot"}
    assert first["spec"]["deploymentPolicy"] == second["spec"]["deploymentPolicy"] == "b"
    # One window: 3 stages of each Package at 5 s, and ONE 15 s reboot for both.
    assert node_critical_path(sc) == 45.0
    assert ideal_makespan(sc, [f"n-{i:03d}" for i in range(50)]) == 7 * 45.0


def _window(node: str, drains: int = 1, interrupts: int = 1) -> WindowStats:
    return WindowStats(node, 40.0, 90, 11, 0.0, 40.0, cordons=drains, drains=drains, interrupts=interrupts)


def test_disruptions_per_node_from_histories_and_from_the_fleet() -> None:
    nodes = ["a", "b", "c"]
    windows = [_window("a"), _window("b"), _window("b", drains=0, interrupts=0), _window("c")]
    assert per_node(windows, nodes, "windows") == {"a": 1, "b": 2, "c": 1}
    assert per_node(windows, nodes, "drains") == {"a": 1, "b": 1, "c": 1}
    assert histogram({"a": 1, "b": 2, "c": 1}) == {"1": 2, "2": 1}
    assert histogram_text({"a": 1, "b": 2, "c": 1}) == "1×2 2×1"
    fleet = FleetProgress(wave=1, nodes={n: NodeProgress(windows=1, drains=1, interrupts=1) for n in ["a", "b"]})
    found = disruptions(Scenario("s", 3, packages=2), nodes, windows, fleet)
    assert found["windows_per_node"] == "1×2 2×1" and found["drains_per_node"] == "1×3"
    assert found["interrupts_per_node_histogram"] == {"1": 3}
    # "c" is missing from the fleet's answer: reported as 0, not hidden.
    assert found["fleet_drains_per_node"] == "0×1 1×2" and found["fleet_waves"] == 1 and found["packages"] == 2
    assert "fleet_drains_per_node" not in disruptions(Scenario("s", 3), nodes, windows, None)


def test_repeated_sizes_are_summarised_as_median_and_spread() -> None:
    rows = [{"nodes": 200, "overhead_ratio": r, "worker_peak_rss_mib": m} for r, m in ((1.3, 150), (1.1, 170), (1.2, 160))]
    rows += [{"nodes": 50, "overhead_ratio": 1.2}, {"nodes": 1000, "overhead_ratio": 1.4},
             {"nodes": 1000, "overhead_ratio": 1.6, "worker_peak_rss_mib": 300}]
    summary = {entry["nodes"]: entry for entry in repeat_summary(rows)}
    assert set(summary) == {200, 1000}  # 50 ran once: nothing to summarise
    ratio = summary[200]["overhead_ratio"]
    assert (summary[200]["runs"], ratio["median"], ratio["min"], ratio["max"]) == (3, 1.2, 1.1, 1.3)
    assert ratio["spread"] == pytest.approx(0.2 / 1.2, abs=1e-3)
    assert summary[200]["worker_peak_rss_mib"]["median"] == 160
    # A figure missing from one run is not summarised (a median of some runs would mislead).
    assert "worker_peak_rss_mib" not in summary[1000] and summary[1000]["overhead_ratio"]["median"] == 1.5
    assert "overhead_ratio" in str(render_summary(list(summary.values())).columns[0]._cells)


def test_batches_handed_over_in_straggling_chunks_are_the_planned_ones() -> None:
    planned = [1, 2, 4, 8, 16, 32, 64, 128, 250, 250, 245]
    seen = [1, 2, 4, 8, 16, 32, 50, 14, 50, 50, 28, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 45]
    assert splits_of(seen, planned) and splits_of(planned, planned)
    assert not splits_of([1, 2, 4, 8, 16, 32, 64, 128, 250, 250, 200, 45], planned[:-1] + [200])
    assert not splits_of([1, 3, 3], [1, 2, 4])  # a batch that crossed the plan's boundary: really other batches
    assert not splits_of([1, 2], [1, 2, 4]) and not splits_of([1, 2, 4, 1], [1, 2, 4])
