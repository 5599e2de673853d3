"""List-then-watch of one kind of object, in a thread, feeding the bridge's event loop. Does I/O (Kubernetes).

The sync `kubernetes` client blocks, so each watch runs in its own daemon thread and hands events to
the asyncio loop with `call_soon_threadsafe` (the bridge's state is only touched on the loop). The
loop per kind: list (a `SYNC` event with every object: the cache is replaced, so deletions missed
while disconnected are seen), then watch from the list's resourceVersion, resuming from the last
resourceVersion seen (bookmarks included) when a watch times out (`kube.watching.watch_from`, the
adapter's one watch loop). A 410 Gone (resourceVersion expired) relists; any other error restarts the watch after an exponential backoff (1 s to 30 s).
Each restart is counted in `noderoll_bridge_watch_restarts_total{kind}`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

import kube
from api import keys
from kube.watching import Watched, event_version, watch_from
from metrics import record_watch_restart

log = logging.getLogger("noderoll.bridge.watch")
SYNC = "SYNC"
NODE_KIND = "Node"
WATCH_TIMEOUT_SECONDS = 60
MAX_BACKOFF_SECONDS = 30.0
QUICK_FAILURE_SECONDS = 5.0


@dataclass(frozen=True)
class WatchEvent:
    """`type` is ADDED, MODIFIED, DELETED or SYNC (then `objects` holds every object)."""

    kind: str
    type: str
    obj: dict[str, Any] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)


def list_function(kind: str, label_selector: str = "") -> Callable[..., Any]:
    """The list call for `kind` (Package, DeploymentPolicy or Node), usable by `watch.Watch.stream`.

    `label_selector` narrows Packages and DeploymentPolicies (never Nodes): one bridge per shard.
    """
    if kind == NODE_KIND:
        core = client.CoreV1Api(kube.api_client())

        def list_nodes(**kwargs: Any) -> Any:
            # No docstring on purpose (as below): Watch.stream yields each event's raw JSON without building a
            # typed V1Node from it (issue 45: 10,000 nodes' events).
            return core.list_node(**kwargs)

        return list_nodes
    plural = keys.PACKAGE_PLURAL if kind == keys.PACKAGE_KIND else keys.POLICY_PLURAL
    api = client.CustomObjectsApi(kube.api_client())

    def list_objects(**kwargs: Any) -> Any:
        # No docstring on purpose: Watch.stream then yields the raw JSON, which is all we read.
        if label_selector:
            kwargs["label_selector"] = label_selector
        return api.list_cluster_custom_object(keys.GROUP, keys.VERSION, plural, **kwargs)

    return list_objects


def read_as_watched(kind: str, name: str, label_selector: str = "") -> dict[str, Any] | None:
    """Package or DeploymentPolicy `name` as a watch with `label_selector` delivers it; None if it does not.

    A quorum read (no resourceVersion): the apiserver's current object, which a watch that lags has
    not delivered yet; an object outside the selector is None, as the watch never delivers it.
    """
    result = list_function(kind, label_selector)(field_selector=f"metadata.name={name}")
    items = result.get("items") or []
    return items[0] if items else None


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without what the bridge never reads and the cache would keep for every object: the server-side
    apply bookkeeping (`metadata.managedFields`, half of a simulated Node's JSON) and a Node's container
    images and volumes (`status.images`, `volumesInUse`, `volumesAttached`: long on a real GPU node).
    Issue 45: the cache of 10,000 Nodes, 20 -> 9.6 KiB per node. Changes and returns `obj` (the watch's own)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    status = obj.get("status")
    if isinstance(status, dict):
        for unread in ("images", "volumesInUse", "volumesAttached"):
            status.pop(unread, None)
    return obj


class Watcher:
    """A restartable list+watch of `kind`; call `start()` once, `stop()` at shutdown."""

    def __init__(
        self, kind: str, loop: asyncio.AbstractEventLoop, sink: Callable[[WatchEvent], None], label_selector: str = ""
    ) -> None:
        self.kind = kind
        self.label_selector = label_selector
        self._loop = loop
        self._sink = sink
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._started = 0.0
        self._last_version: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    def start(self) -> None:
        """Start the watch thread."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (it ends at the next event or watch timeout)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def _emit(self, event: WatchEvent) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._sink, event)

    def _list(self) -> str:
        """List every object, emit SYNC, return the list's resourceVersion.

        Served from the apiserver's watch cache, as an informer lists (`resourceVersion=0`), and once
        a version was seen, not older than it (`NotOlderThan`): a relist never goes back in time, and
        the watch from the list's version delivers whatever came after it."""
        version = {"resource_version": self._last_version, "resource_version_match": "NotOlderThan"} \
            if self._last_version else {"resource_version": "0"}
        # Read as raw JSON, the cache's shape: a listing of 10,000 Nodes built as typed models first held
        # hundreds of MiB at once (issue 45).
        data = kube.untyped(list_function(self.kind, self.label_selector), **version)
        self._emit(WatchEvent(self.kind, SYNC, objects=[slim(o) for o in data.get("items") or []]))
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _run(self) -> None:
        backoff = 1.0
        version: str | None = None
        while not self._stop.is_set():
            self._started = time.monotonic()
            try:
                if version is None:
                    version = self._last_version = self._list()
                version = self._watch_from(version) or None
                if version is None:
                    record_watch_restart(self.kind)
                    log.info("watch of %s: resourceVersion expired; relisting", self.kind)
                    continue
                backoff = 1.0
            except ProtocolError as err:
                # The apiserver ends a watch at its timeout by closing the chunked stream, which urllib3
                # reports as "Response ended prematurely": that is a normal end, resumed from `version`.
                # Only a stream that breaks right away counts as a restart (and backs off).
                version = self._last_version or version
                if time.monotonic() - self._started >= QUICK_FAILURE_SECONDS:
                    continue
                record_watch_restart(self.kind)
                log.warning("watch of %s broke at once (%s); retrying in %.0fs", self.kind, err, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            except ApiException as err:
                record_watch_restart(self.kind)
                if kube.is_gone(err):
                    log.info("watch of %s: resourceVersion %s expired; relisting", self.kind, version)
                    version = None
                    continue
                log.warning("watch of %s failed (HTTP %s); retrying in %.0fs", self.kind, err.status, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            except Exception as err:  # noqa: BLE001 - network errors of every kind: restart the watch
                record_watch_restart(self.kind)
                log.warning("watch of %s failed (%s); retrying in %.0fs", self.kind, err, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    def _watch_from(self, version: str) -> str:
        """Watch from `version` until the server ends the watch; return the last version seen ("" after
        410 Gone: list again)."""
        self._watch = watch.Watch()
        watched = Watched(list_function(self.kind, self.label_selector), f"{self.kind} objects", classify=False)
        version, _ = watch_from(watched, version, WATCH_TIMEOUT_SECONDS, self._on_event, self._watch)
        return version

    def _on_event(self, event: dict[str, Any]) -> bool | None:
        if self._stop.is_set():
            return True
        # Kept outside the watch too, so a stream that breaks mid-way resumes from here.
        self._last_version = event_version(event, self._last_version or "")
        kind = event.get("type")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._emit(WatchEvent(self.kind, str(kind), obj=slim(event.get("raw_object") or {})))
        return None
