"""The one watch loop of the Kubernetes adapter: watch from a resourceVersion, resume, re-list on 410. Does I/O.

Every wait on the API is list-then-watch: list once (which gives the resourceVersion to start from),
then `watch_from` that version for a slice of seconds (the caller heartbeats between slices), and the
next slice from the last resourceVersion the watch saw, bookmarks included. A 410 Gone (the version
is too old, also sent as an `ERROR` event) answers "" (`kube.is_gone`): the caller lists again. Other
API errors are classified by `kube.raise_for` (retryable ones stay retryable), or re-raised as they
are when the caller handles them itself (`classify=False`, the bridge's backoff).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

import kube

T = TypeVar("T")
BOOKMARK = "BOOKMARK"


def event_version(event: dict[str, Any], default: str = "") -> str:
    """The resourceVersion an event moves the watch to (from its raw JSON, so bookmarks count too)."""
    raw = event.get("raw_object") or {}
    version = (raw.get("metadata") or {}).get("resourceVersion") if isinstance(raw, dict) else None
    if not version and event.get("type") != BOOKMARK:
        meta = getattr(event.get("object"), "metadata", None)
        version = getattr(meta, "resource_version", None)
    return str(version or default)


@dataclass(frozen=True)
class Watched:
    """What a watch lists: the list call and its parameters (namespace, selectors), named in errors.

    `classify`: API errors other than 410 go through `kube.raise_for`; False re-raises them as they
    are (a caller with its own backoff, the bridge)."""

    list_call: Callable[..., Any]
    what: str
    params: dict[str, Any] = field(default_factory=dict)
    classify: bool = True


def watch_from(watched: Watched, resource_version: str, seconds: int,
               on_event: Callable[[dict[str, Any]], T | None],
               stream: watch.Watch | None = None) -> tuple[str, T | None]:
    """Watch `watched` from `resource_version` for at most `seconds`.

    `on_event` gets every ADDED, MODIFIED, DELETED and BOOKMARK event (after the resume version moved
    on; a bookmark's object is raw JSON); the first answer other than None ends the watch. Returns (resourceVersion to resume from, that
    answer or None); the version is "" after 410 Gone: list again. `stream`: the caller's
    `watch.Watch`, to stop it from another thread.
    """
    version = resource_version
    stream = stream or watch.Watch()
    try:
        for event in stream.stream(watched.list_call, resource_version=version, timeout_seconds=seconds,
                                   allow_watch_bookmarks=True, **watched.params):
            kind = event.get("type")
            if kind == "ERROR":
                raw = event.get("raw_object") or {}
                raise ApiException(status=int(raw.get("code") or 500), reason=str(raw.get("message", "")))
            version = event_version(event, version)
            answer = on_event(event)
            if answer is not None:
                return version, answer
    except ApiException as err:
        if kube.is_gone(err):
            return "", None
        if not watched.classify:
            raise
        kube.raise_for(err, f"watch {watched.what}")
    finally:
        stream.stop()
    return version, None
