"""Instant queries against Prometheus for the fleet's analysis gates: `query_prometheus`. Does I/O (HTTP).

Plain HTTP (the standard library's urllib) against Prometheus' documented API:
`GET <address>/api/v1/query?query=<PromQL>`, answered with the JSON envelope
`{"status": "success" | "error", "data": {"resultType": ..., "result": ...}, "errorType", "error"}`.
The address is the gate's own (`spec.analysis[].address`), else the worker's
(`noderoll worker --prometheus-address`, env `NODEROLL_PROMETHEUS_ADDRESS`, Helm value
`prometheus.address`). Failures are classified (`protocol/errors.py`):

* unreachable (connection refused, unknown host, timeout, HTTP 5xx or 429, a body that is not the
  API's JSON): `PrometheusUnavailable`, retryable: the fleet's retry policy tries again and then
  fails the gate with this reason;
* a query Prometheus refuses (HTTP 400 or 422, `bad_data`: a PromQL syntax error; any other 4xx):
  `PrometheusQueryError`, not retried;
* a result that is neither a `vector` nor a `scalar` (a `matrix` from a range selector, a
  `string`): `PrometheusResultType`, not retried;
* no address at all: `PrometheusNotConfigured`, not retried.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeats import beat, keep_alive
from protocol.activities import PromSeries, QueryPrometheusInput, QueryPrometheusResult
from protocol.activity_refs import QUERY_PROMETHEUS
from protocol.errors import (
    PROMETHEUS_NOT_CONFIGURED,
    PROMETHEUS_QUERY_ERROR,
    PROMETHEUS_RESULT_TYPE,
    PROMETHEUS_UNAVAILABLE,
    fatal,
)

ENV_ADDRESS = "NODEROLL_PROMETHEUS_ADDRESS"
# One HTTP request's bound; the fleet gives the activity a minute and retries it.
REQUEST_TIMEOUT_SECONDS = 20.0
_address = os.environ.get(ENV_ADDRESS, "")


def configure(address: str | None) -> None:
    """The worker's Prometheus address (`--prometheus-address`; None keeps the environment's)."""
    global _address
    if address is not None:
        _address = address


def configured_address() -> str:
    """The worker's Prometheus address ("" = none)."""
    return _address


def query_url(address: str, query: str) -> str:
    """The instant-query URL of `query` at `address` (a base URL, optionally with a path prefix)."""
    return f"{address.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"


def _unavailable(address: str, why: str) -> ApplicationError:
    return ApplicationError(f"Prometheus at {address} unreachable: {why}", type=PROMETHEUS_UNAVAILABLE)


def parse_answer(address: str, status: int, body: bytes) -> QueryPrometheusResult:
    """The result of one answer of `address` (HTTP `status`, `body`); raises the classified failure."""
    try:
        answer: Any = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        raise _unavailable(address, f"HTTP {status} without Prometheus' API JSON: {body[:200]!r}")
    if answer["status"] == "error" or status >= 400:
        message = f"{answer.get('errorType', 'error')}: {answer.get('error', '')}".strip()
        if status >= 500 or status == 429:
            raise _unavailable(address, f"HTTP {status} {message}")
        raise fatal(f"Prometheus at {address} refused the query (HTTP {status}): {message}", PROMETHEUS_QUERY_ERROR)
    data = answer.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return QueryPrometheusResult("scalar", [PromSeries({}, str(result[1]))], address)
    if kind == "vector" and isinstance(result, list):
        series = [PromSeries({str(k): str(v) for k, v in (item.get("metric") or {}).items()}, str(item["value"][1]))
                  for item in result]
        return QueryPrometheusResult("vector", series, address)
    raise fatal(f"the query returned a {kind} (a gate needs an instant vector or a scalar: drop range selectors "
                "like [5m] or wrap them in a function such as rate())", PROMETHEUS_RESULT_TYPE)


@activity.defn(name=QUERY_PROMETHEUS.name)
@keep_alive
def query_prometheus(input: QueryPrometheusInput) -> QueryPrometheusResult:
    """Run one instant query for gate `input.gate` (module rules: address, failure classes)."""
    address = input.address or _address
    if not address:
        raise fatal(f"no Prometheus address for gate {input.gate}: set spec.analysis[].address or the worker's "
                    f"--prometheus-address ({ENV_ADDRESS})", PROMETHEUS_NOT_CONFIGURED)
    beat(f"query {input.gate} at {address}")
    request = urllib.request.Request(query_url(address, input.query), headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:  # noqa: S310 - http(s) only
            return parse_answer(address, response.status, response.read())
    except urllib.error.HTTPError as err:
        return parse_answer(address, err.code, err.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        reason = getattr(err, "reason", err)
        raise _unavailable(address, str(reason)) from err
