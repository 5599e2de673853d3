"""fleetsim's retry of API writes while the apiserver is away (`fleetsim.kube.until_landed`). Pure:
the call is a fake that fails as an unavailable apiserver does; sleeping is replaced."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fleetsim import kube
from fleetsim.kube import KubeError


def failing(statuses: list[int]) -> tuple[Callable[[], None], list[int]]:
    """A call that raises KubeError with each status in turn, then succeeds; and its call log."""
    calls: list[int] = []

    def call() -> None:
        calls.append(len(calls))
        if len(calls) <= len(statuses):
            raise KubeError(statuses[len(calls) - 1], "DELETE", "/api/v1/namespaces/a/pods/p", "")

    return call, calls


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.time, "sleep", lambda _seconds: None)


def test_no_answer_and_5xx_are_retried_until_the_write_lands() -> None:
    call, calls = failing([0, 503, 429, 0])
    kube.until_landed(call)
    assert len(calls) == 5


def test_done_statuses_count_as_landed() -> None:
    call, calls = failing([0, 409])
    kube.until_landed(call, done=(404, 409))
    assert len(calls) == 2


def test_a_refusal_is_not_retried() -> None:
    call, calls = failing([422])
    with pytest.raises(KubeError):
        kube.until_landed(call)
    assert len(calls) == 1


def test_gives_up_after_the_retry_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "STATUS_RETRY_SECONDS", -1.0)
    call, calls = failing([0, 0])
    with pytest.raises(KubeError):
        kube.until_landed(call)
    assert len(calls) == 1


def test_a_read_is_retried_and_its_answer_returned_within_its_own_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # A node back from a reboot lists its pods this way (`fleetsim.kubelet.resume_node`), for longer
    # than the status writes' window.
    monkeypatch.setattr(kube, "STATUS_RETRY_SECONDS", -1.0)
    answers = iter([KubeError(0, "GET", "/api/v1/pods", ""), KubeError(503, "GET", "/api/v1/pods", ""),
                    {"items": []}])

    def call() -> object:
        answer = next(answers)
        if isinstance(answer, KubeError):
            raise answer
        return answer

    assert kube.until_landed(call, done=(), seconds=600.0) == {"items": []}
