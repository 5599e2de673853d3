"""Events on Nodes, aggregated: one Event per (node, reason), updated in place. Does I/O.

Kubernetes' own event recorder does the same for repeats (`kubectl describe node` shows
`x3 over 2h`): the Event named after the node (name and uid) and the reason is created once, and
each later occurrence raises its `count`, replaces its `message` and `lastTimestamp`. So a node
keeps a fixed set of noderoll Events however many windows run on it (issue #14: nothing grows with
the number of rollouts), where it used to get one Event per step of every window.

* `emit_event`: one occurrence, counted once per `NodeEvent.key`: the key is kept on the Event (an
  annotation), so a retried activity finds it recorded and does not count it twice.
* `record_event`: the Event of a wait whose `count` the caller keeps (refused evictions), updated
  in place while the wait lasts.

A process remembers the Events it wrote (name -> count, key, resourceVersion), so an occurrence
costs one PATCH guarded by the resourceVersion; a miss (another worker wrote it, a restart) or a
conflict costs a create or a GET and a PATCH. The node's uid is part of the name: a node deleted and
created again under the same name starts with fresh Events, as `kubectl describe` expects.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

import kube
from api.keys import EVENT_NAMESPACE
from protocol.node_activities import NodeEvent

EVENT_SOURCE = "noderoll"
KEY_ANNOTATION = "noderoll.io/event-key"
CACHE_SIZE = 16_384
WRITE_ATTEMPTS = 4


@dataclass(frozen=True)
class _Seen:
    count: int
    key: str
    resource_version: str


class _Cache:
    """The Events this process wrote last (bounded, least recently used dropped first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, _Seen] = OrderedDict()

    def get(self, name: str) -> _Seen | None:
        with self._lock:
            seen = self._items.get(name)
            if seen is not None:
                self._items.move_to_end(name)
            return seen

    def put(self, name: str, obj: Any) -> None:
        meta = obj.metadata
        seen = _Seen(int(obj.count or 1), (meta.annotations or {}).get(KEY_ANNOTATION, ""),
                     meta.resource_version or "")
        with self._lock:
            self._items[name] = seen
            self._items.move_to_end(name)
            while len(self._items) > CACHE_SIZE:
                self._items.popitem(last=False)

    def drop(self, name: str) -> None:
        with self._lock:
            self._items.pop(name, None)


_CACHE = _Cache()


def event_name(node: str, uid: str, reason: str) -> str:
    """The Event's name: the node's name and a digest of (node, uid, reason). Pure."""
    digest = hashlib.sha256(f"{node}/{uid}/{reason}".encode()).hexdigest()[:16]
    return f"{node}.noderoll.{digest}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _body(node: str, uid: str, event: NodeEvent, count: int) -> client.CoreV1Event:
    now = datetime.now(UTC)
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=event_name(node, uid, event.reason), namespace=EVENT_NAMESPACE,
                                     annotations={KEY_ANNOTATION: event.key}),
        involved_object=client.V1ObjectReference(kind="Node", name=node, api_version="v1", uid=uid or node),
        reason=event.reason,
        message=event.message[:1024],
        type="Warning" if event.warning else "Normal",
        source=client.V1EventSource(component=EVENT_SOURCE, host=node),
        first_timestamp=now,
        last_timestamp=now,
        count=count,
    )


def _patch(name: str, event: NodeEvent, count: int, resource_version: str) -> Any:
    body = {
        "metadata": {"annotations": {KEY_ANNOTATION: event.key}, "resourceVersion": resource_version},
        "message": event.message[:1024], "count": count, "lastTimestamp": _now(),
        "type": "Warning" if event.warning else "Normal",
    }
    return kube.core().patch_namespaced_event(name, EVENT_NAMESPACE, body,
                                              _content_type="application/merge-patch+json")


def _write(node: str, uid: str, event: NodeEvent, count: int | None) -> bool:
    """Create or update the Event (`count` None: one more occurrence, once per key); True when written."""
    name = event_name(node, uid, event.reason)
    seen = _CACHE.get(name)
    for _ in range(WRITE_ATTEMPTS):
        try:
            if seen is None:
                try:
                    _CACHE.put(name, kube.core().create_namespaced_event(
                        EVENT_NAMESPACE, _body(node, uid, event, count or 1)))
                    return True
                except ApiException as err:
                    if not kube.is_conflict(err):
                        raise
                stored = kube.core().read_namespaced_event(name, EVENT_NAMESPACE)
                _CACHE.put(name, stored)
                seen = _CACHE.get(name)
                assert seen is not None
            if count is None and seen.key == event.key:
                return False  # this occurrence is recorded already (a retried activity)
            _CACHE.put(name, _patch(name, event, count if count is not None else seen.count + 1,
                                    seen.resource_version))
            return True
        except ApiException as err:
            if not (kube.is_conflict(err) or kube.is_not_found(err)):
                kube.raise_for(err, f"record event {event.reason} on node {node}")
            # Written by someone else since (409), or expired by the event TTL (404): look again.
            _CACHE.drop(name)
            seen = None
    raise RuntimeError(f"record event {event.reason} on node {node}: still conflicting after {WRITE_ATTEMPTS} attempts")


def emit_event(node: str, event: NodeEvent, uid: str = "") -> bool:
    """One occurrence of `event` on the Node (its series' `count` + 1); False when this key was
    recorded already. `uid`: the Node's uid ("" when unknown: the name stands in)."""
    return _write(node, uid, event, None)


def emit_events(node: str, events: list[NodeEvent], uid: str = "") -> None:
    """Several occurrences at once; those of one reason become one (their messages joined)."""
    merged: dict[str, NodeEvent] = {}
    for event in events:
        known = merged.get(event.reason)
        merged[event.reason] = event if known is None else NodeEvent(
            event.reason, f"{known.message}; {event.message}", f"{known.key}+{event.key}"[-200:],
            known.warning or event.warning)
    for event in merged.values():
        emit_event(node, event, uid)


def record_event(node: str, event: NodeEvent, count: int, uid: str = "") -> None:
    """The Event of a wait (e.g. refused evictions): created, or updated in place with the caller's `count`."""
    _write(node, uid, event, count)
