"""`query_prometheus` over real HTTP: a local stand-in answering Prometheus' documented JSON (the real
server is tests/integration/test_gates_and_windows.py), and a port nobody listens on.

Checks the request (path prefix, encoded query), the heartbeat, the gate's address winning over the
worker's, and the classification: unreachable is retryable, a refused query is not, no address is not.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import prometheus
from localstack.prometheus import free_port
from protocol.activities import PromSeries, QueryPrometheusInput, QueryPrometheusResult
from protocol.errors import PROMETHEUS_NOT_CONFIGURED, PROMETHEUS_QUERY_ERROR, PROMETHEUS_UNAVAILABLE


class _Api(BaseHTTPRequestHandler):
    """Answers /prom/api/v1/query like Prometheus: `up` is a vector, anything else a bad_data error."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query).get("query", [""])[0]
        self.seen.append(f"{url.path}?{query}")
        if url.path == "/prom/api/v1/query" and query == 'up{job="gpu"}':
            status, body = 200, {"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {"job": "gpu"}, "value": [1700000000, "1"]}]}}
        else:
            status, body = 400, {"status": "error", "errorType": "bad_data", "error": f"cannot parse {query!r}"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/prom"
    finally:
        server.shutdown()
        thread.join(timeout=5)


def run(input: QueryPrometheusInput, beats: list[Any] | None = None) -> QueryPrometheusResult:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=30))
    if beats is not None:
        env.on_heartbeat = lambda *details: beats.append(details)
    result: QueryPrometheusResult = env.run(prometheus.query_prometheus, input)
    return result


def test_query_with_the_gates_address_and_a_heartbeat(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "_address", "http://127.0.0.1:1")  # the worker's: not used
    beats: list[Any] = []
    result = run(QueryPrometheusInput('up{job="gpu"}', api, "up"), beats)
    assert result == QueryPrometheusResult("vector", [PromSeries({"job": "gpu"}, "1")], api)
    assert _Api.seen[-1] == '/prom/api/v1/query?up{job="gpu"}'
    assert beats and f"query up at {api}" in beats[0]


def test_the_workers_address_serves_gates_without_one(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "_address", api)
    assert run(QueryPrometheusInput('up{job="gpu"}', "", "up")).address == api


def test_a_refused_query_is_not_retried(api: str) -> None:
    with pytest.raises(ApplicationError) as err:
        run(QueryPrometheusInput("up{", api, "bad"))
    assert (err.value.type, err.value.non_retryable) == (PROMETHEUS_QUERY_ERROR, True)
    assert "refused the query (HTTP 400): bad_data: cannot parse 'up{'" in err.value.message


def test_unreachable_is_retryable() -> None:
    address = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    with pytest.raises(ApplicationError) as err:
        run(QueryPrometheusInput("up", address, "down"))
    assert (err.value.type, err.value.non_retryable) == (PROMETHEUS_UNAVAILABLE, False)
    assert err.value.message.startswith(f"Prometheus at {address} unreachable: ")


def test_no_address_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "_address", "")
    with pytest.raises(ApplicationError) as err:
        run(QueryPrometheusInput("up", "", "lonely"))
    assert (err.value.type, err.value.non_retryable) == (PROMETHEUS_NOT_CONFIGURED, True)
    assert "no Prometheus address for gate lonely" in err.value.message
