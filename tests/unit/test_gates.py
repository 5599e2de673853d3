"""Analysis gates: the condition language (api/analysis.py), the bookkeeping (planning/rollout/gates.py) and
the answers of Prometheus' API as the activity reads them (activities/prometheus.py)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.prometheus import parse_answer, query_url
from api.analysis import AnalysisGate, Operator, parse_condition
from api.enums import GateWhen
from api.policy import DeploymentPolicySpec
from planning.rollout import gates as g
from protocol.activities import PromSeries, QueryPrometheusResult
from protocol.errors import (
    PROMETHEUS_QUERY_ERROR,
    PROMETHEUS_RESULT_TYPE,
    PROMETHEUS_UNAVAILABLE,
)

T0 = datetime(2025, 1, 6, 12, tzinfo=UTC)


def gate(**fields: object) -> AnalysisGate:
    base: dict[str, object] = {"name": "errors", "query": "sum(x)", "successCondition": "result < 1",
                               "intervalSeconds": 10}
    return AnalysisGate.model_validate(base | fields)


def vector(*values: str, labels: list[dict[str, str]] | None = None) -> QueryPrometheusResult:
    names = labels or [{"instance": f"n{i}"} for i in range(len(values))]
    return QueryPrometheusResult("vector", [PromSeries(n, v) for n, v in zip(names, values, strict=True)])


# --- the condition language -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "operator", "threshold"), [
    pytest.param("result < 0.5", Operator.LT, 0.5, id="lt"),
    pytest.param("result<=1", Operator.LE, 1.0, id="le-no-spaces"),
    pytest.param("  result == 0  ", Operator.EQ, 0.0, id="eq-padded"),
    pytest.param("result != -2", Operator.NE, -2.0, id="ne-negative"),
    pytest.param("result >= 1e3", Operator.GE, 1000.0, id="ge-exponent"),
    pytest.param("result > .25", Operator.GT, 0.25, id="gt-leading-dot"),
])
def test_comparisons_parse(text: str, operator: Operator, threshold: float) -> None:
    condition = parse_condition(text)
    assert (condition.operator, condition.threshold) == (operator, threshold)
    assert not condition.wants_empty


@pytest.mark.parametrize("text", ["empty", "EMPTY", "no series", " no  series "])
def test_empty_forms_parse(text: str) -> None:
    assert parse_condition(text).wants_empty
    assert str(parse_condition(text)) == "empty"


@pytest.mark.parametrize("text", [
    "result =< 1", "result < ", "value < 1", "result < 1 and result > 0", "__import__('os')", "result < 1e999",
    "result < 0x10", "", "result < nan", "1 > result",
])
def test_anything_else_is_refused_with_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"write `result <op> <number>`"):
        parse_condition(text)


@pytest.mark.parametrize(("text", "value", "holds"), [
    ("result < 0.5", 0.4, True), ("result < 0.5", 0.5, False), ("result <= 0.5", 0.5, True),
    ("result == 0", 0.0, True), ("result != 0", 0.0, False), ("result >= 2", 2.0, True), ("result > 2", 2.0, False),
    ("result < 1", math.nan, False), ("result != 1", math.nan, False), ("result < 1", -math.inf, True),
])
def test_holds(text: str, value: float, holds: bool) -> None:
    assert parse_condition(text).holds(value) is holds


@given(st.sampled_from(list(Operator)), st.floats(allow_nan=False, allow_infinity=False, width=32),
       st.floats(allow_nan=False, width=32))
def test_comparison_agrees_with_python(operator: Operator, threshold: float, value: float) -> None:
    condition = parse_condition(f"result {operator.value} {threshold!r}")
    expected = {"<": value < threshold, "<=": value <= threshold, "==": value == threshold,
                "!=": value != threshold, ">=": value >= threshold, ">": value > threshold}[operator.value]
    assert condition.holds(value) is expected


# --- judging a sample -------------------------------------------------------------------------------


@pytest.mark.parametrize(("condition", "result", "ok", "value"), [
    pytest.param("result < 1", vector("0.5", labels=[{"job": "gpu"}]), True, '{job="gpu"} 0.5', id="one-series"),
    pytest.param("result < 1", QueryPrometheusResult("scalar", [PromSeries({}, "3")]), False, "3", id="scalar"),
    pytest.param("result < 1", vector(), False, "no series", id="no-series-fails-comparison"),
    pytest.param("result < 1", vector("0", "2", "5"), False, '{instance="n1"} 2 (2 of 3 series fail)', id="some-fail"),
    pytest.param("result < 1", vector("0", "0.5"), True, '2 series hold (highest {instance="n1"} 0.5)', id="all-hold"),
    pytest.param("result < 1", vector("NaN"), False, '{instance="n0"} NaN', id="nan"),
    pytest.param("empty", vector(), True, "no series", id="empty-ok"),
    pytest.param("empty", vector("1", "1", "1", "1", labels=[{"alertname": "X", "i": str(i)} for i in range(4)]),
                 False, '4 series: {alertname="X",i="0"} 1; {alertname="X",i="1"} 1; {alertname="X",i="2"} 1 and 1 more',
                 id="empty-firing"),
])
def test_judge(condition: str, result: QueryPrometheusResult, ok: bool, value: str) -> None:
    outcome = g.judge(parse_condition(condition), result)
    assert (outcome.ok, outcome.value) == (ok, value)


def test_judge_an_error() -> None:
    outcome = g.judge(parse_condition("result < 1"), None, "Prometheus at x unreachable")
    assert (outcome.ok, outcome.error) == (False, "Prometheus at x unreachable")


# --- the bookkeeping --------------------------------------------------------------------------------


def ok(value: str = "0") -> g.SampleOutcome:
    return g.SampleOutcome(True, value)


def bad(value: str = "5") -> g.SampleOutcome:
    return g.SampleOutcome(False, value)


def test_after_canary_point_runs_between_batches_gates_too() -> None:
    gates = [gate(name="a", when="afterCanary"), gate(name="b"), gate(name="c", when="continuous")]
    book = g.GateBook()
    assert g.open_point(book, gates, GateWhen.AFTER_CANARY)
    assert sorted(book.tracks) == ["a", "b"]
    assert g.open_point(book, gates, GateWhen.BETWEEN_BATCHES)
    assert sorted(book.tracks) == ["b"]
    assert not g.open_point(book, [gate(name="a", when="afterCanary")], GateWhen.BETWEEN_BATCHES)
    assert g.point_passed(book)


def test_count_in_a_row_passes_and_failure_limit_tolerates() -> None:
    spec = gate(count=3, failureLimit=1)
    book = g.GateBook()
    g.open_point(book, [spec], GateWhen.BETWEEN_BATCHES)
    now = T0
    for outcome in (ok(), bad(), ok(), ok()):
        assert g.point_due(book, [spec], now) == [spec]
        assert g.record_point(book, spec, outcome, now) is None
        assert not g.point_passed(book)
        assert g.point_due(book, [spec], now) == []
        assert g.next_sample(book.tracks) == now + timedelta(seconds=10)
        now += timedelta(seconds=10)
    assert g.record_point(book, spec, ok(), now) is None
    assert g.point_passed(book)
    assert (book.tracks["errors"].samples, book.tracks["errors"].failures) == (5, 1)


def test_more_failures_than_the_limit_fail_with_query_value_time_and_reason() -> None:
    spec = gate(failureLimit=1)
    book = g.GateBook()
    g.open_point(book, [spec], GateWhen.BETWEEN_BATCHES)
    assert g.record_point(book, spec, bad("3"), T0) is None
    failure = g.record_point(book, spec, bad("4"), T0 + timedelta(seconds=10))
    assert failure == g.GateFailure(
        gate="errors", query="sum(x)", condition="result < 1", value="4", at=(T0 + timedelta(seconds=10)).isoformat(),
        reason="2 failed sample(s), more than failureLimit 1", when="betweenBatches", number=1)
    assert book.failure == failure and book.failures == 1
    assert g.failure_text(failure) == (
        f"gate errors failed at {failure.at}: sum(x) = 4 (success condition result < 1; 2 failed sample(s), "
        "more than failureLimit 1)")


def test_an_error_fails_at_once_whatever_the_limit() -> None:
    spec = gate(failureLimit=5)
    book = g.GateBook()
    g.open_point(book, [spec], GateWhen.BETWEEN_BATCHES)
    failure = g.record_point(book, spec, g.SampleOutcome(False, "", "Prometheus at x unreachable"), T0)
    assert failure is not None and failure.reason == "the query could not be evaluated: Prometheus at x unreachable"


def test_continuous_gate_counts_failures_in_a_row_and_needs_a_fresh_good_sample() -> None:
    spec = gate(when="continuous", failureLimit=1)
    book = g.GateBook()
    assert g.continuous_due(book, [spec], T0) == [spec]
    assert not g.continuous_clear(book, [spec], T0)
    assert g.record_continuous(book, spec, ok(), T0) is None
    assert g.continuous_clear(book, [spec], T0 + timedelta(seconds=5))
    assert not g.continuous_clear(book, [spec], T0 + timedelta(seconds=10))  # stale: due again
    assert g.record_continuous(book, spec, bad(), T0 + timedelta(seconds=10)) is None
    assert not g.continuous_clear(book, [spec], T0 + timedelta(seconds=11))
    assert g.record_continuous(book, spec, ok(), T0 + timedelta(seconds=20)) is None  # resets the run
    assert g.record_continuous(book, spec, bad(), T0 + timedelta(seconds=30)) is None
    failure = g.record_continuous(book, spec, bad(), T0 + timedelta(seconds=40))
    assert failure is not None and failure.reason == "2 failed sample(s) in a row, more than failureLimit 1"
    assert g.continuous_clear(book, [], T0)  # no continuous gate: nothing holds


def test_resume_overrides_once_and_retry_evaluates_again() -> None:
    spec, alert = gate(), gate(name="alert", when="continuous")
    book = g.GateBook()
    g.open_point(book, [spec, alert], GateWhen.BETWEEN_BATCHES)
    g.record_continuous(book, alert, ok(), T0)
    assert g.record_point(book, spec, bad(), T0) is not None
    assert not g.point_passed(book)
    assert g.override(book)
    assert book.failure is None and g.point_passed(book) and book.failures == 1
    assert not g.override(book)  # nothing left to override
    # The next point is evaluated as usual and may fail again.
    g.open_point(book, [spec, alert], GateWhen.BETWEEN_BATCHES)
    assert g.record_point(book, spec, bad(), T0 + timedelta(minutes=1)) is not None
    assert book.failures == 2 and book.failure is not None and book.failure.number == 2
    g.restart(book)
    assert book.failure is None and not g.point_passed(book) and book.tracks["errors"].samples == 0
    assert book.continuous == {}


def test_override_lets_a_continuous_gate_start_a_batch_once() -> None:
    alert = gate(name="alert", when="continuous")
    book = g.GateBook()
    assert g.record_continuous(book, alert, bad(), T0) is not None
    assert g.override(book)
    assert g.continuous_clear(book, [alert], T0 + timedelta(seconds=5))
    assert g.record_continuous(book, alert, bad(), T0 + timedelta(seconds=10)) is not None


def test_summary_of_a_point() -> None:
    spec, other = gate(count=3), gate(name="alerts", successCondition="empty")
    book = g.GateBook()
    g.open_point(book, [spec, other], GateWhen.AFTER_CANARY)
    g.record_point(book, spec, ok("0.1"), T0)
    g.record_point(book, other, ok("no series"), T0)
    assert g.summary(book, [spec, other]) == "gates after the canary: errors 1/3 (value 0.1), alerts passed"


# --- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "message"), [
    pytest.param({"successCondition": "result =< 1"}, "successCondition 'result =< 1' is not understood", id="cond"),
    pytest.param({"when": "continuous", "count": 2}, "count is not used by when: continuous", id="count-continuous"),
    pytest.param({"address": "prometheus:9090"}, "is not a Prometheus URL: write http://host:port", id="address"),
    pytest.param({"name": "Errors"}, "gate name 'Errors' is invalid", id="name"),
    pytest.param({"when": "always"}, "Input should be 'afterCanary', 'betweenBatches' or 'continuous'", id="when"),
    pytest.param({"intervalSeconds": 0}, "greater than or equal to 1", id="interval"),
])
def test_invalid_gate_is_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        gate(**fields)
    assert message in str(err.value)


def test_gate_names_are_unique_in_a_policy() -> None:
    with pytest.raises(ValidationError, match="analysis\\[1\\].name 'errors' is used twice"):
        DeploymentPolicySpec.model_validate({"default": {"budget": {"count": 1}},
                                             "analysis": [gate().dump(), gate().dump()]})


def test_gate_defaults() -> None:
    spec = gate()
    assert (spec.when, spec.needed, spec.failure_limit, spec.address) == (GateWhen.BETWEEN_BATCHES, 1, 0, None)


# --- Prometheus' API answers (the activity's reading of them) ---------------------------------------


ADDRESS = "http://prom:9090"


def test_query_url_encodes_the_query_and_keeps_a_path_prefix() -> None:
    assert query_url("http://prom:9090/prometheus/", 'up{job="a"} < 1') == (
        "http://prom:9090/prometheus/api/v1/query?query=up%7Bjob%3D%22a%22%7D+%3C+1")


def test_vector_and_scalar_answers() -> None:
    body = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"gpu"},"value":[1,"0.5"]}]}}'
    assert parse_answer(ADDRESS, 200, body) == QueryPrometheusResult(
        "vector", [PromSeries({"job": "gpu"}, "0.5")], ADDRESS)
    body = b'{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}'
    assert parse_answer(ADDRESS, 200, body) == QueryPrometheusResult("scalar", [PromSeries({}, "NaN")], ADDRESS)


@pytest.mark.parametrize(("status", "body", "error_type", "retryable", "text"), [
    pytest.param(400, b'{"status":"error","errorType":"bad_data","error":"parse error at char 5"}',
                 PROMETHEUS_QUERY_ERROR, False, "refused the query (HTTP 400): bad_data: parse error", id="bad-query"),
    pytest.param(503, b'{"status":"error","errorType":"unavailable","error":"starting"}',
                 PROMETHEUS_UNAVAILABLE, True, "HTTP 503 unavailable: starting", id="5xx"),
    pytest.param(502, b"<html>bad gateway</html>", PROMETHEUS_UNAVAILABLE, True,
                 "HTTP 502 without Prometheus' API JSON", id="proxy"),
    pytest.param(200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
                 PROMETHEUS_RESULT_TYPE, False, "the query returned a matrix", id="matrix"),
])
def test_failures_are_classified(status: int, body: bytes, error_type: str, retryable: bool, text: str) -> None:
    with pytest.raises(ApplicationError) as err:
        parse_answer(ADDRESS, status, body)
    assert err.value.type == error_type
    assert err.value.non_retryable is not retryable
    assert text in err.value.message
