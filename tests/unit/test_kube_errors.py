"""The one classification of Kubernetes API errors (`kube`) and of a missing Node (`kube.nodes`)."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

import kube
from kube.nodes import node_not_found
from protocol import errors


@pytest.mark.parametrize(
    ("status", "kind", "retryable", "gone"),
    [
        pytest.param(404, kube.ApiErrorKind.NOT_FOUND, False, False, id="404"),
        pytest.param(409, kube.ApiErrorKind.CONFLICT, True, False, id="409"),
        pytest.param(410, kube.ApiErrorKind.CLIENT, False, True, id="410-gone"),
        pytest.param(422, kube.ApiErrorKind.CLIENT, False, False, id="422"),
        pytest.param(429, kube.ApiErrorKind.TOO_MANY_REQUESTS, True, False, id="429"),
        pytest.param(503, kube.ApiErrorKind.SERVER, True, False, id="503"),
        pytest.param(0, kube.ApiErrorKind.SERVER, True, False, id="network"),
    ],
)
def test_api_errors_are_classified_by_status(status: int, kind: kube.ApiErrorKind, retryable: bool, gone: bool) -> None:
    err = ApiException(status=status, reason="r")
    assert kube.classify(err) is kind
    assert kube.is_retryable(err) is retryable
    assert kube.is_gone(err) is gone


def test_a_missing_node_is_the_non_retryable_node_not_found() -> None:
    failure = node_not_found("n1", "disappeared during its reboot")
    assert failure.type == errors.NODE_NOT_FOUND
    assert failure.non_retryable
    assert failure.message == "node n1 disappeared during its reboot"
