"""The report's timeline and page (planning/views/rollout_report.py, planning/views/report_html.py), from plain histories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest

from planning.views.report_html import render_html
from planning.views.rollout_report import ActivityRun, ReportInput, RunHistory, Signal, build_report

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def activity(kind: str, start: float, end: float, data: Any = None, **extra: Any) -> ActivityRun:
    return ActivityRun(kind, data or {}, at(start), at(start), at(end), outcome=extra.pop("outcome", "completed"),
                       **extra)


def pod(package: str, modes: list[str], attempt: int = 1, interrupt: bool = False) -> dict[str, Any]:
    return {"job": {"package": package, "modes": modes, "attempt": attempt,
                    "interrupt": {"type": "reboot"} if interrupt else None}}


def a_window(node: str, fail: bool = False) -> RunHistory:
    failed_pod = activity("run_stage_pod", 20, 30, pod("kernel", ["apply", "apply-check"]),
                          result={"exit_code": 7, "mode": "apply", "log_tail": "boom"})
    retried = activity("run_stage_pod", 31, 40, pod("kernel", ["apply", "apply-check"], attempt=2),
                       result={"exit_code": 7, "mode": "apply", "log_tail": "boom"})
    good = [activity("run_stage_pod", 20, 40, pod("kernel", ["apply", "apply-check", "interrupt"], interrupt=True),
                     result={"exit_code": 0})]
    return RunHistory(f"node/{node}", "r1", at(0), at(50), [
        activity("write_node_state", 1, 2), activity("cordon_node", 2, 3), activity("drain_node", 3, 10),
        *([failed_pod, retried] if fail else good), activity("uncordon_node", 45, 46)])


def fleet() -> RunHistory:
    hand_outs = [activity("request_windows", 0, 1, {"nodes": ["a"]}), activity("request_windows", 60, 61,
                                                                                {"nodes": ["b", "c"]})]
    answers = [Signal("window_result", at(55), {"node": "a", "cordoned": True, "drained": True, "interrupt": "reboot",
                                                "outcomes": {"kernel": {"state": "complete"}}}),
               Signal("window_result", at(110), {"node": "b", "cordoned": True, "drained": True,
                                                 "outcomes": {"kernel": {"state": "erroring", "message": "apply: 7"}}})]
    return RunHistory("fleet/gpu", "f1", at(0), None, hand_outs, answers)


class Elements(HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def having(self, css_class: str) -> list[dict[str, str]]:
        return [a for _t, a in self.tags if css_class in a.get("class", "").split()]


def test_timeline_bars_by_kind_failures_retries_batches_and_disruptions() -> None:
    data = ReportInput("gpu", [fleet()], {"a": [a_window("a")], "b": [a_window("b", fail=True)], "c": []},
                       records={"a": {"packages": {"kernel": {"version": "1.0.0", "state": "complete"}}}},
                       canary=["a"], phase="Failed")
    report = build_report(data)
    rows = {r.node: r for r in report.nodes}
    assert [b.kind for b in rows["a"].bars] == ["other", "drain", "drain", "interrupt", "other"]
    assert [b.retried for b in rows["b"].bars if b.kind == "stage"] == [False, True]
    assert [m.label for m in report.marks] == ["canary", "batch 2"] and report.marks[0].canary
    assert (rows["a"].windows, rows["a"].drains, rows["a"].interrupts, rows["b"].interrupts) == (1, 1, 1, 0)
    assert {f.node for f in report.failures} == {"b"} and len(report.failures) == 3
    assert any(f.what == "kernel erroring" and f.message == "apply: 7" for f in report.failures)
    assert rows["a"].record == {"kernel": "1.0.0 complete"}
    assert report.summary["batches"] == "2" and report.summary["phase"] == "Failed"


def test_the_page_is_self_contained_with_a_row_per_node_and_marks_on_failed_nodes() -> None:
    page = render_html(build_report(ReportInput("gpu", [fleet()], {"a": [a_window("a")],
                                                                    "b": [a_window("b", fail=True)]}, canary=["a"])))
    assert "<script" not in page and "default-src 'none'" in page
    elements = Elements()
    elements.feed(page)
    assert [a["data-node"] for a in elements.having("node-row")] == ["a", "b"]
    assert {a["data-node"] for a in elements.having("failure-mark")} == {"b"}
    assert len(elements.having("retry-mark")) == 1 and len(elements.having("canary")) == 1
    assert not [a for _t, a in elements.tags if a.get("src") or a.get("href")]


def test_a_stage_pod_is_split_by_its_containers_times_and_a_reboot_by_its_confirmation() -> None:
    def times(start: float, end: float) -> list[str]:
        return [at(start).isoformat(), at(end).isoformat()]

    reboot_pod = activity("run_stage_pod", 20, 60, pod("kernel", ["apply", "apply-check", "interrupt"], interrupt=True),
                          result={"exit_code": 0, "containers": {
                              "package": times(21, 22), "apply": times(22, 30), "apply-check": times(30, 31),
                              "interrupt": times(31, 32)}})
    window = RunHistory("node/a", "r1", at(0), at(70), [reboot_pod])
    row = build_report(ReportInput("gpu", [fleet()], {"a": [window]})).nodes[0]
    assert [(b.kind, b.label) for b in row.bars] == [
        ("other", "kernel package"), ("stage", "kernel apply"), ("check", "kernel apply-check"),
        ("interrupt", "kernel interrupt"), ("interrupt", "kernel reboot confirmation")]
    assert (row.bars[1].start, row.bars[1].end, row.bars[-1].end) == (at(22), at(30), at(60))


@pytest.mark.parametrize("cluster, fleet_id", [pytest.param("", "fleet/gpu", id="no-cluster"),
                                               pytest.param("east", "fleet/east/gpu", id="cluster")])
def test_the_report_names_the_fleet_by_its_workflow_id(cluster: str, fleet_id: str) -> None:
    report = build_report(ReportInput("gpu", [fleet()], {"a": [a_window("a")]}, cluster=cluster))
    assert report.fleet_id == fleet_id and report.summary["fleet"] == fleet_id
    page = render_html(report)
    assert f"<title>noderoll report: {fleet_id}</title>" in page and f'aria-label="timeline of {fleet_id}"' in page
