"""`kube.watching.watch_from`: where a watch resumes, what ends it, and what a 410 or another error means."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kube.watching import Watched, watch_from


class _Stream:
    """Stands in for `kubernetes.watch.Watch`: yields the given events, records how it was called."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.kwargs: dict[str, Any] = {}
        self.stopped = False

    def stream(self, list_call: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.kwargs = kwargs
        yield from self.events

    def stop(self) -> None:
        self.stopped = True


def _pod(version: str, phase: str) -> dict[str, Any]:
    obj = SimpleNamespace(metadata=SimpleNamespace(resource_version=version), status=SimpleNamespace(phase=phase))
    return {"type": "MODIFIED", "object": obj, "raw_object": {"metadata": {"resourceVersion": version}}}


BOOKMARK = {"type": "BOOKMARK", "object": {}, "raw_object": {"metadata": {"resourceVersion": "30"}}}
WATCHED = Watched(list_call=lambda **_: None, what="pods of job j", params={"namespace": "ns"})


def test_resumes_from_the_last_version_seen_bookmarks_included() -> None:
    stream = _Stream([_pod("20", "Pending"), BOOKMARK])
    version, answer = watch_from(WATCHED, "10", 5, lambda e: None, stream)  # type: ignore[arg-type]
    assert (version, answer) == ("30", None)
    assert stream.kwargs["resource_version"] == "10" and stream.kwargs["allow_watch_bookmarks"] is True
    assert stream.kwargs["namespace"] == "ns" and stream.kwargs["timeout_seconds"] == 5 and stream.stopped


def test_the_first_answer_ends_the_watch_at_its_event() -> None:
    stream = _Stream([_pod("20", "Running"), _pod("21", "Succeeded"), _pod("22", "Succeeded")])

    def done(event: dict[str, Any]) -> str | None:
        return "done" if event["object"].status.phase == "Succeeded" else None

    assert watch_from(WATCHED, "10", 5, done, stream) == ("21", "done")  # type: ignore[arg-type]


def test_410_gone_as_an_event_or_an_exception_means_list_again() -> None:
    gone = {"type": "ERROR", "object": None, "raw_object": {"code": 410, "message": "too old resource version"}}
    assert watch_from(WATCHED, "10", 5, lambda e: None, _Stream([gone])) == ("", None)  # type: ignore[arg-type]

    class _Raises(_Stream):
        def stream(self, list_call: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
            raise ApiException(status=410, reason="Gone")

    assert watch_from(WATCHED, "10", 5, lambda e: None, _Raises([])) == ("", None)  # type: ignore[arg-type]


def test_other_errors_are_classified_or_left_to_the_caller() -> None:
    failed = {"type": "ERROR", "object": None, "raw_object": {"code": 500, "message": "etcd unavailable"}}
    # Classified: a 5xx stays retryable, named after what was watched.
    with pytest.raises(RuntimeError, match="watch pods of job j: HTTP 500"):
        watch_from(WATCHED, "10", 5, lambda e: None, _Stream([failed]))  # type: ignore[arg-type]
    # A caller with its own backoff gets the ApiException itself.
    mine = Watched(list_call=WATCHED.list_call, what="packages", classify=False)
    with pytest.raises(ApiException) as raised:
        watch_from(mine, "10", 5, lambda e: None, _Stream([failed]))  # type: ignore[arg-type]
    assert raised.value.status == 500
