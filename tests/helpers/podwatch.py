"""What the pods of a namespace and one Node go through during a window, as a watch sees it (no polling).

`NoticeWatch` runs two watches on background threads (the namespace's pods, the Node by name) and keeps,
per pod, when its `noderoll.io/eviction-at` annotation first appeared (and its value), when it began to
go (deletionTimestamp, or its DELETED event) and its last phase; for the node, every
`noderoll.io/MaintenanceScheduled` and `noderoll.io/Draining` condition it showed. Times are the test's
own wall clock at reception (the in-process worker's clock: one machine), so a test compares them with
the annotation's RFC 3339 value too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client import ApiClient

from api.keys import CONDITION_DRAINING, CONDITION_MAINTENANCE_SCHEDULED, EVICTION_AT_ANNOTATION


@dataclass
class PodSeen:
    """One pod as the watch saw it."""

    notice_at: datetime | None = None  # when the annotation first appeared
    notice: str = ""  # its value then
    going_at: datetime | None = None  # deletionTimestamp first seen, or DELETED
    phase: str = ""
    node: str = ""


@dataclass
class NoticeWatch:
    """Pods of `namespace` and the Node `node`, watched for the duration of a `with` block."""

    api: ApiClient
    namespace: str
    node: str
    pods: dict[str, PodSeen] = field(default_factory=dict)
    # (wall time, status, reason, message) of each distinct condition state seen.
    scheduled: list[tuple[datetime, str, str, str]] = field(default_factory=list)
    draining: list[tuple[datetime, str, str, str]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _watches: list[watch.Watch] = field(default_factory=list)
    _stopped: bool = False
    _node_seen: threading.Event = field(default_factory=threading.Event)

    def _stream(self, lister: Callable[..., Any], note: Callable[[str, Any], None], **kwargs: Any) -> None:
        stream = watch.Watch()
        self._watches.append(stream)
        try:
            for event in stream.stream(lister, timeout_seconds=600, **kwargs):
                note(event["type"], event["object"])
        except Exception as err:  # noqa: BLE001 - `stop()` closes the stream under the reader
            if not self._stopped:
                self.errors.append(err)

    def _pod(self, kind: str, pod: client.V1Pod) -> None:
        now = datetime.now(UTC)
        seen = self.pods.setdefault(pod.metadata.name, PodSeen())
        value = (pod.metadata.annotations or {}).get(EVICTION_AT_ANNOTATION, "")
        if value and seen.notice_at is None:
            seen.notice_at, seen.notice = now, value
        if seen.going_at is None and (kind == "DELETED" or pod.metadata.deletion_timestamp is not None):
            seen.going_at = now
        seen.phase = (pod.status.phase if pod.status else "") or seen.phase
        seen.node = pod.spec.node_name or seen.node

    def _node(self, kind: str, node: client.V1Node) -> None:
        now = datetime.now(UTC)
        self._node_seen.set()
        for cond in (node.status.conditions or []) if node.status else []:
            for kind_, log in ((CONDITION_MAINTENANCE_SCHEDULED, self.scheduled), (CONDITION_DRAINING, self.draining)):
                state = (cond.status, cond.reason or "", cond.message or "")
                if cond.type == kind_ and (not log or log[-1][1:] != state):
                    log.append((now, *state))
        if not any(c.type == CONDITION_MAINTENANCE_SCHEDULED for c in (node.status.conditions or [])) \
                and self.scheduled and self.scheduled[-1][1] != "absent":
            self.scheduled.append((now, "absent", "", ""))

    def scheduled_at(self) -> datetime | None:
        """When the node first showed MaintenanceScheduled=True."""
        return next((at for at, status, *_ in self.scheduled if status == "True"), None)

    @contextmanager
    def running(self) -> Iterator[NoticeWatch]:
        core = client.CoreV1Api(self.api)
        threads = [
            threading.Thread(target=self._stream, args=(core.list_namespaced_pod, self._pod),
                             kwargs={"namespace": self.namespace}, daemon=True),
            threading.Thread(target=self._stream, args=(core.list_node, self._node),
                             kwargs={"field_selector": f"metadata.name={self.node}"}, daemon=True),
        ]
        for thread in threads:
            thread.start()
        # The node's first event (ADDED) says its watch runs; the pods' watch started with it.
        if not self._node_seen.wait(timeout=30):
            raise RuntimeError(f"no watch event for node {self.node} in 30 s")
        try:
            yield self
        finally:
            self._stopped = True
            for stream in self._watches:
                stream.stop()
            for thread in threads:
                thread.join(timeout=10)
        if self.errors:
            raise RuntimeError("a watch broke before the test ended") from self.errors[0]
