"""Pure parts of the scale bench (issue 45): the sampled scenario, the fleet's runs, workflow-task latency and
payloads from its histories, the status sizes, the decisions' per-node slope."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.decisions import per_node_bytes, synthetic_nodes
from bench.fleet_history import CARRY, FIRST_INPUT, largest_payloads, runs_summary, task_latency
from bench.sample import StatusSizes, node_runs_query
from bench.scenario import Scenario, batch_sizes, policy_manifest


def _event(kind: EventType.ValueType, event_id: int, at: float) -> HistoryEvent:
    event = HistoryEvent(event_type=kind, event_id=event_id)
    event.event_time.seconds = int(at)
    event.event_time.nanos = int((at - int(at)) * 1e9)
    return event


def test_a_sampled_scenario_has_a_count_budget_a_floor_and_stops_at_the_batch_that_reaches_its_windows() -> None:
    sc = Scenario("s", 10_000, budget_count=50, floor_percent=50, windows=1000)
    budget = policy_manifest(sc)["spec"]["default"]["budget"]
    assert budget == {"count": 50, "minAvailable": {"resource": "nvidia.com/gpu", "percent": 50}}
    assert sc.sampled
    sizes = batch_sizes(sc, [f"n{i:05d}" for i in range(sc.nodes)])
    assert sizes[:7] == [1, 2, 4, 8, 16, 32, 50]
    assert sum(sizes) >= 1000 and sum(sizes[:-1]) < 1000
    # The whole wave of a fleet no larger than the sample is not sampled.
    assert not Scenario("s", 200, windows=1000).sampled
    assert policy_manifest(Scenario("s", 200))["spec"]["default"]["budget"] == {"percent": 25}


def test_the_node_runs_of_a_run_are_counted_by_its_task_queue() -> None:
    assert node_runs_query("q1") == "WorkflowType = 'NodeWorkflow' AND TaskQueue = 'q1'"
    assert node_runs_query("q1", running=True).endswith(" AND ExecutionStatus = 'Running'")


def test_status_sizes_keep_the_largest_per_kind() -> None:
    sizes = StatusSizes()
    sizes.note("Package", {"a": "x" * 10})
    sizes.note("Package", {"a": "x"})
    sizes.note("DeploymentPolicy", None)
    assert sizes.largest == {"Package": len('{"a":"xxxxxxxxxx"}'), "DeploymentPolicy": 2}


def test_fleet_runs_latency_and_payloads_from_the_histories() -> None:
    first = [_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 1, 0.0)]
    first[0].workflow_execution_started_event_attributes.input.payloads.add(data=b"x" * 100)
    scheduled = _event(EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, 2, 1.0)
    started = _event(EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED, 3, 1.5)
    started.workflow_task_started_event_attributes.scheduled_event_id = 2
    completed = _event(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, 4, 2.5)
    completed.workflow_task_completed_event_attributes.scheduled_event_id = 2
    activity = _event(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 5, 2.5)
    activity.activity_task_scheduled_event_attributes.activity_type.name = "list_fleet_nodes"
    done = _event(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, 6, 3.0)
    done.activity_task_completed_event_attributes.scheduled_event_id = 5
    done.activity_task_completed_event_attributes.result.payloads.add(data=b"y" * 500)
    signal = _event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, 7, 3.5)
    signal.workflow_execution_signaled_event_attributes.signal_name = "window_result"
    signal.workflow_execution_signaled_event_attributes.input.payloads.add(data=b"z" * 50)
    first += [scheduled, started, completed, activity, done, signal]
    second = [_event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 1, 10.0)]
    attrs = second[0].workflow_execution_started_event_attributes
    attrs.continued_execution_run_id = "run-1"
    attrs.input.payloads.add(data=b"c" * 2000)
    runs = [first, second]

    summary = runs_summary(runs)
    assert (summary.runs, summary.continue_as_new, summary.events_per_run) == (2, 1, [7, 1])
    assert summary.largest_history_bytes > 2000
    latency = task_latency(runs)
    assert (latency.tasks, latency.total_p50_s, latency.queued_p50_s, latency.running_p50_s) == (1, 1.5, 0.5, 1.0)
    sizes = largest_payloads(runs)
    assert sizes.largest[CARRY] > 2000 > sizes.largest[FIRST_INPUT] > 100
    assert sizes.largest["activity list_fleet_nodes result"] > 500
    assert sizes.largest["signal window_result"] > 50
    assert sizes.count["activity list_fleet_nodes input"] == 1


def test_the_per_node_slope_of_a_payload_between_the_smallest_and_largest_fleet() -> None:
    rows = [{"nodes": 200, "largest_payload_bytes": {"carry": 10_000}},
            {"nodes": 1000, "largest_payload_bytes": {"carry": 50_000}},
            {"nodes": 10_000, "largest_payload_bytes": {"carry": 500_000}}]
    assert per_node_bytes(rows, "carry") == round(490_000 / 9_800, 1)
    assert per_node_bytes(rows, "absent") is None


def test_the_decisions_fleet_is_the_scenarios_nodes_ready_with_eight_gpus() -> None:
    nodes = synthetic_nodes(Scenario("bench", 1200))
    assert len(nodes) == 1200 and nodes[0].name == "bench-0000" and nodes[-1].name == "bench-1199"
    assert all(n.ready and n.allocatable == {"nvidia.com/gpu": "8"} for n in nodes)
    assert nodes[0].labels["bench.noderoll.io/run"] == "bench"


def test_the_scale_figures_are_in_the_row_and_printed_within_120_columns() -> None:
    from bench.command import WIDTH, render
    from bench.sample import StatusSizes
    from bench.scale_probes import Probes, ProgressSizes, scale_figures

    sizes = StatusSizes()
    sizes.note("Package", {"phase": "Progressing"})
    statuses = [{"command": "status", "seconds": 0.8, "exit_code": 0, "output_bytes": 10},
                {"command": "status", "seconds": 1.2, "exit_code": 0, "output_bytes": 10}]
    plan = {"command": "plan", "seconds": 3.5, "exit_code": 2, "output_bytes": 99}
    row = {"nodes": 10_000, **scale_figures([], [], Probes(sizes, ProgressSizes(largest=1234), statuses, plan)),
           "noderoll_cpu_seconds_per_window": 0.2, "all_cpu_seconds_per_window": 1.1}
    assert row["noderoll_status_median_s"] == 1.0
    assert row["largest_payload_bytes"]["progress query answer"] == 1234
    lines = render({"results": [row]})
    assert all(len(line) <= WIDTH for line in lines)
    text = "\n".join(lines)
    assert "noderoll plan of the wave s (exit)" in text and "3.5 (2)" in text
    assert "status object bytes (largest)" in text


def test_a_sampled_waves_end_is_extrapolated_from_its_full_batches() -> None:
    from bench.eta import extrapolated_end
    from bench.histories import WindowStats

    def window(i: int, start: float, answer: float) -> WindowStats:
        return WindowStats(f"n{i}", answer - start, 60, 5, start, answer + 1, answered=answer)

    # Batches 1, 2, then two full batches of 4 (each 50 s): 8 windows in 100 s, 0.08 windows/s.
    windows = [window(0, 0, 50), window(1, 50, 100), window(2, 50, 100)]
    windows += [window(3 + i, 100, 150) for i in range(4)] + [window(7 + i, 150, 200) for i in range(4)]
    end = extrapolated_end(windows, [1, 2, 4, 4], nodes=51)
    assert end == 200 + 40 / 0.08
    assert extrapolated_end(windows[:7], [1, 2, 4], nodes=51) is None  # one full batch: no rate
