"""Every Kubernetes request of the shared client has a timeout unless the caller gives its own."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

import kube


class _Sent(Exception):
    """Raised by the recording transport instead of sending."""

    def __init__(self, timeout: Any) -> None:
        super().__init__("recorded")
        self.timeout = timeout


def _recording_client() -> client.ApiClient:
    api = kube._TimedApiClient(client.Configuration(host="http://127.0.0.1:1"))

    def request(*args: Any, **kwargs: Any) -> Any:
        raise _Sent(kwargs.get("_request_timeout"))

    api.rest_client.request = request  # type: ignore[method-assign]
    return api


def test_typed_calls_default_to_the_request_timeout() -> None:
    with pytest.raises(_Sent) as sent:
        client.CoreV1Api(_recording_client()).read_node("n1")
    assert sent.value.timeout == kube.REQUEST_TIMEOUT


def test_a_callers_own_timeout_wins() -> None:
    with pytest.raises(_Sent) as sent:
        client.CoreV1Api(_recording_client()).list_namespaced_pod("ns", watch=True, _request_timeout=(5, 90))
    assert sent.value.timeout == (5, 90)
