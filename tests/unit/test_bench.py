"""Pure parts of `noderoll bench`: metric parsing, request classification, ideal makespan, summaries."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import apimetrics
from bench.histories import batches_from_sends, percentile
from bench.reqcount import classify
from bench.scenario import Scenario, batch_sizes, ideal_makespan, node_critical_path

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
