"""Pure parts of `noderoll bench`: metric parsing, request classification, ideal makespan, summaries."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import apimetrics
from bench.command import WIDTH, floor_shape, render, render_summary, repeat_summary
from bench.histories import (
    LOCAL_ACTIVITY_MARKER,
    FleetHistory,
    WindowStats,
    batches_from_sends,
    fleet_history,
    histogram,
    histogram_text,
    per_node,
    percentile,
    window_stats,
)
from bench.reqcount import classify
from bench.resources import cores_busy, per_window
from bench.scenario import Scenario, batch_sizes, ideal_makespan, node_critical_path, package_manifests
from bench.summary import disruptions, splits_of, summarize
from planning.views.fleet_status import FleetProgress, NodeProgress

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
    lines = render_summary(list(summary.values()))
    assert any("overhead_ratio" in line and "1.2 [1.1-1.3]" in line for line in lines)
    assert all(len(line) <= WIDTH for line in lines)


def test_batches_handed_over_in_straggling_chunks_are_the_planned_ones() -> None:
    planned = [1, 2, 4, 8, 16, 32, 64, 128, 250, 250, 245]
    seen = [1, 2, 4, 8, 16, 32, 50, 14, 50, 50, 28, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 45]
    assert splits_of(seen, planned) and splits_of(planned, planned)
    assert not splits_of([1, 2, 4, 8, 16, 32, 64, 128, 250, 250, 200, 45], planned[:-1] + [200])
    assert not splits_of([1, 3, 3], [1, 2, 4])  # a batch that crossed the plan's boundary: really other batches
    assert not splits_of([1, 2], [1, 2, 4]) and not splits_of([1, 2, 4, 1], [1, 2, 4])


def test_creations_are_posts_of_a_resource_not_of_a_subresource() -> None:
    counts = Counter({("POST", "jobs"): 4, ("POST", "pods/eviction"): 3, ("POST", "pods/binding"): 2,
                      ("PATCH", "nodes"): 9, ("POST", "configmaps"): 2})
    assert apimetrics.created(counts) == Counter({("POST", "jobs"): 4, ("POST", "configmaps"): 2})


def _row(**extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "nodes": 200, "packages": 2, "makespan_s": 544.3, "ideal_makespan_s": 405.0, "overhead_ratio": 1.344,
        "overhead_median_s": 16.5, "overhead_p95_s": 25.9, "batches": [1, 2, 4, 8, 16, 32, 50, 50, 37],
        "windows_per_node": "1×200", "drains_per_node": "1×200", "interrupts_per_node": "1×200",
        "stage_pods_per_window_median": 3, "objects_created_per_window": 9.0, "noderoll_requests_per_window": 52.8,
        "history_events_per_window_median": 89, "history_events_per_window_max": 95,
        "activities_per_window_median": 11, "local_activities_per_window_median": 0,
        "workflow_tasks_per_window_median": 14,
        "window_time_median_s": {"window": 61.5, "workflow_tasks_queued": 4.3, "workflow_tasks_running": 2.0,
                                 "first_workflow_task_queued": 1.9, "activities_queued": 0.4},
        "cpu_seconds": {f"component-with-a-long-name-{i}": 100.0 + i for i in range(12)},
        "objects_left": "none",
    }
    row.update(extra)
    return row


def test_the_summary_is_one_figure_per_line_within_120_columns() -> None:
    report = {"results": [_row(), _row(nodes=1000, throughput_windows_per_s=2.34, floor_windows_per_s=6.4,
                                       ratio_to_floor=0.365)],
              "drain": {"pods": 10, "noderoll_drain_s": 3.1, "kubectl_mode": "eviction", "kubectl_drain_s": 4.0,
                        "ratio": 0.78}}
    lines = render(report)
    assert all(len(line) <= WIDTH for line in lines), max(lines, key=len)
    assert not any("…" in line for line in lines)
    text = "\n".join(lines)
    # Every figure is there in full, also those too long for one line (the CPU seconds wrap).
    assert "544.3 / 405.0 / 1.344" in text and "16.5 / 25.9" in text and "52.8" in text
    assert "component-with-a-long-name-0 100" in text and "component-with-a-long-name-11 111" in text
    assert "4.3 s / 2.0 s" in text and "2.34 / 6.4 / 0.365" in text and "ratio 0.78" in text
    assert sum(line.startswith("noderoll bench, run") for line in lines) == 2
    # A figure a run lacks is left out, not shown as "None".
    assert render({"results": [{"nodes": 20, "makespan_s": 90.0}]}) == [
        "noderoll bench, run 1: 20 nodes, ? package(s), strategy exponential, budget 25%, jitter 0%",
        "  makespan / ideal (s) / ratio             90.0 / ? / ?"]


def test_the_window_overhead_to_the_runs_close_and_to_its_answer_to_the_fleet() -> None:
    """A window closes after its answer (the signal's delivery, one more workflow task): both are
    reported, the close as the overhead, the answer as the overhead the fleet waits for."""
    sc = Scenario("s", 2, 5.0, 15.0)
    windows = [WindowStats("n1", 40.0, 60, 5, 1000.0, 1040.0, answered=1038.0),
               WindowStats("n2", 42.0, 60, 5, 1000.0, 1042.0, answered=1039.0),
               WindowStats("n3", 41.0, 60, 5, 1000.0, 1041.0)]  # no answer found: its close
    measured = {"critical_path_s": 30.0, "makespan_s": 90.0, "actual_batches": [1, 2], "ideal_makespan_s": 60.0,
                "batches": [1, 2], "apiserver_delta": Counter(), "worker_requests": {}, "bridge_requests": {},
                "status_complete_s": 90.0, "last_window_end_s": 89.0, "worker_rss": 0, "bridge_rss": 0,
                "rollout_events": FleetHistory(events=10, workflow_tasks=3, sticky_timeouts=0, running_timeouts=0),
                "cordoned": 0}
    row = summarize(sc, measured, windows)
    assert (row["overhead_median_s"], row["answer_overhead_median_s"]) == (11.0, 9.0)
    assert row["answer_overhead_p95_s"] == 11.0 and row["overhead_p95_s"] == 12.0
    assert "    to the answer to the fleet p50 / p95   9.0 / 11.0" in render({"results": [row]})


def test_the_cpu_of_the_0_second_rollout_and_of_the_floor_per_window_and_in_cores() -> None:
    used = {"kube-apiserver": 30.0, "worker": 10.0, "temporal": 20.0}
    assert per_window(used, 200) == {"kube-apiserver": 0.15, "worker": 0.05, "temporal": 0.1, "all": 0.3}
    assert cores_busy(used, 40.0) == 1.5 and cores_busy(used, 0.0) is None and per_window(used, 0) == {}
    row = {"nodes": 200, "no_interrupt_cpu_cores": 1.5, "no_interrupt_cpu_seconds_per_window": per_window(used, 200),
           "floor_cpu_cores": 0.9, "floor_cpu_seconds_per_window": {"temporal": 0.05, "bench": 0.03, "all": 0.08}}
    text = "\n".join(render({"results": [row]}))
    assert "1.5; all 0.300, kube-apiserver 0.150, temporal 0.100, worker 0.050" in text
    assert "0.9; all 0.080, temporal 0.050, bench 0.030" in text


def test_a_window_history_counts_its_workflow_tasks_and_local_activities() -> None:
    from temporalio.api.enums.v1 import EventType, TimeoutType
    from temporalio.api.history.v1 import HistoryEvent

    def event(kind: EventType.ValueType, at: int, marker: str = "") -> HistoryEvent:
        e = HistoryEvent(event_type=kind)
        e.event_time.seconds = at
        if marker:
            e.marker_recorded_event_attributes.marker_name = marker
        return e

    events = [event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 0),
              event(EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, 0),
              event(EventType.EVENT_TYPE_MARKER_RECORDED, 1, LOCAL_ACTIVITY_MARKER),
              event(EventType.EVENT_TYPE_MARKER_RECORDED, 1, "patch"),
              event(EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, 2),
              event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, 3)]
    stats = window_stats("n", events)
    assert (stats.workflow_tasks, stats.local_activities, stats.seconds) == (2, 1, 3.0)
    assert (stats.sticky_timeouts, stats.running_timeouts) == (0, 0)
    # A task not picked up from the worker's sticky queue in time, and one the worker did not answer.
    timed_out = []
    for kind in (TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START, TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE,
                 TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START):
        e = event(EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, 2)
        e.workflow_task_timed_out_event_attributes.timeout_type = kind
        timed_out.append(e)
    stats = window_stats("n", [*events[:-1], *timed_out, events[-1]])
    assert (stats.sticky_timeouts, stats.running_timeouts) == (2, 1)
    # The fleet's history is counted the same way (its replays are the longest).
    assert fleet_history([*events[:-1], *timed_out, events[-1]]) == FleetHistory(
        events=9, workflow_tasks=2, sticky_timeouts=2, running_timeouts=1)


def test_peak_overlap_counts_windows_running_at_once() -> None:
    from bench.histories import peak_overlap

    def w(start: float, end: float) -> WindowStats:
        return WindowStats("n", end - start, 1, 1, start, end)

    assert peak_overlap([w(0, 10), w(5, 15), w(10, 20), w(12, 13)]) == 3  # 5-15, 10-20, 12-13
    assert peak_overlap([w(0, 1), w(1, 2)]) == 1 and peak_overlap([]) == 0
    # A run that answered its fleet is out of its window, though it closes a moment later.
    answered = WindowStats("n", 10, 1, 1, 0, 10, answered=8.0)
    assert peak_overlap([answered, w(9, 20)]) == 1 and peak_overlap([w(0, 10), w(9, 20)]) == 2


def test_the_ideal_of_rolling_and_of_jittered_batches() -> None:
    from bench.scenario import ideal_makespan, node_paths, planned_batches

    names = [f"r-{i:03d}" for i in range(20)]
    flat = Scenario("r", 20, stage_seconds=5, reboot_seconds=15, strategy="rolling", budget_percent=25)
    # No jitter: 20 nodes of 30 s on 5 slots.
    assert planned_batches(flat, names) == [] and ideal_makespan(flat, names) == pytest.approx(4 * 30.0)
    jittered = Scenario("r", 20, strategy="rolling", budget_percent=25, jitter_percent=50)
    paths = node_paths(jittered, names)
    assert all(15.0 <= p <= 45.0 for p in paths.values()) and len(set(paths.values())) > 10
    # At least the work spread over the slots, at most one slowest node more.
    assert sum(paths.values()) / 5 <= ideal_makespan(jittered, names) <= sum(paths.values()) / 5 + max(paths.values())
    batched = Scenario("r", 20, strategy="exponential", budget_percent=25, jitter_percent=50)
    expected = sum(max(paths[n] for n in batch) for batch in planned_batches(batched, names))
    assert ideal_makespan(batched, names) == pytest.approx(expected)
    assert ideal_makespan(jittered, names) < expected  # the batches wait for their slowest node


def test_the_floor_has_the_throughput_windows_shape_with_its_local_activities() -> None:
    # The 0-second window of one Package without interrupt (2 activities, 2 local activities: no
    # drain, so no cordon) sets the floor's shape; without the throughput rollout, the measured
    # window's. Local activities were left out before bd614ef's fix: the floor then ran 2 activities
    # for a window of 4 calls.
    row = {"activities_per_window_median": 5.0, "local_activities_per_window_median": 3.0,
           "no_interrupt_activities_per_window_median": 2.0, "no_interrupt_local_activities_per_window_median": 2.0}
    assert floor_shape(row) == (2, 2)
    assert floor_shape({"activities_per_window_median": 5.0, "local_activities_per_window_median": 3.0}) == (5, 3)
    # Runs recorded before local activities existed: activities only.
    assert floor_shape({"activities_per_window_median": 8.0}) == (8, 0)


def test_the_calibration_is_a_fixed_amount_of_work_timed_in_cpu_seconds() -> None:
    from bench.calibrate import cpu_seconds_of_fixed_work, fixed_work

    # The same work every time (a checksum, so it cannot be skipped), and a positive CPU time.
    assert fixed_work(10) == fixed_work(10) == 10 * fixed_work(1) > 0
    assert 0 < cpu_seconds_of_fixed_work(repeats=1)


def test_the_makespan_parts_and_the_cpu_timeline_are_in_the_row_and_printed() -> None:
    from bench.cpu_timeline import Sample

    sc = Scenario("s", 2, 5.0, 15.0)
    windows = [WindowStats("n1", 32.0, 60, 5, 1000.0, 1032.0, answered=1031.0),
               WindowStats("n2", 33.0, 60, 5, 1032.5, 1065.5, answered=1065.0),
               WindowStats("n3", 31.0, 60, 5, 1032.6, 1063.6)]
    measured = {"critical_path_s": 30.0, "makespan_s": 77.0, "actual_batches": [1, 2], "ideal_makespan_s": 60.0,
                "batches": [1, 2], "apiserver_delta": Counter(), "worker_requests": {}, "bridge_requests": {},
                "status_complete_s": 77.0, "last_window_end_s": 75.5, "worker_rss": 0, "bridge_rss": 0,
                "rollout_events": FleetHistory(events=10, workflow_tasks=3, sticky_timeouts=0, running_timeouts=0),
                "cordoned": 0, "started_epoch": 990.0,
                "cpu_samples": [Sample(1040.0 + 0.25 * i, 0.95, {"worker": 0.1}) for i in range(4)]}
    row = summarize(sc, measured, windows)
    parts = row["makespan_parts"]
    assert (parts["start_s"], parts["batch_overheads_sum_s"], parts["turns_sum_s"], parts["tail_s"]) == (10.0, 3.5, 1.5, 2.0)
    assert row["makespan_s"] == row["ideal_makespan_s"] + 10.0 + 3.5 + 1.5 + 2.0
    assert row["cpu_timeline"][0] == {}  # no sample in the first batch
    assert row["cpu_timeline"][1]["saturated_s"] == 1.0
    text = "\n".join(render({"results": [row]}))
    assert "start / batches / turns / tail (s) 10.0 / 3.5 / 1.5 / 2.0" in text
    assert "seconds with the cores saturated, per batch ? 1.0" in text
