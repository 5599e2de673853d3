"""Every stage pod and stage ConfigMap noderoll creates for a node, as seen while they exist. Threads.

A window deletes its stage pods once its outcome is written on the node (issue #14), so a test
that asserts on what ran reads this record instead of the apiserver's current objects: two watches
(pods and ConfigMaps by `noderoll.io/node`) started before the window and kept until `stop()`,
recording every object by uid (its latest version seen).

    recorder = StagePodRecorder(api, node).start()
    ...
    recorder.pods()          # every stage pod, oldest first
    recorder.pods_of(name)   # uids of the pods named `name` (one, unless it was created again)
"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client, watch
from kubernetes.client import ApiClient

from api.keys import PACKAGE_POD_NAMESPACE, STAGE_COMPONENT, STAGE_COMPONENT_LABEL, STAGE_NODE_LABEL

WATCH_SECONDS = 10


class StagePodRecorder:
    """Records the stage pods and ConfigMaps of one node, or of every node when `node` is "" (module docstring)."""

    def __init__(self, api: ApiClient, node: str = "") -> None:
        self.api = api
        self.selector = f"{STAGE_NODE_LABEL}={node}" if node else f"{STAGE_COMPONENT_LABEL}={STAGE_COMPONENT}"
        self._pods: dict[str, client.V1Pod] = {}
        self._config_maps: dict[str, client.V1ConfigMap] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Barrier(3)

    def start(self) -> StagePodRecorder:
        """Start the watches; returns once each listed (nothing created afterwards is missed)."""
        core = client.CoreV1Api(self.api)
        threading.Thread(target=self._run, args=(core.list_namespaced_pod, self._pods), daemon=True).start()
        threading.Thread(target=self._run, args=(core.list_namespaced_config_map, self._config_maps),
                         daemon=True).start()
        self._ready.wait(timeout=30)
        return self

    def _run(self, lister: Any, into: dict[str, Any]) -> None:
        listing = lister(PACKAGE_POD_NAMESPACE, label_selector=self.selector)
        self._record(listing.items, into)
        version = listing.metadata.resource_version
        self._ready.wait(timeout=30)
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(lister, PACKAGE_POD_NAMESPACE, label_selector=self.selector,
                                           resource_version=version, timeout_seconds=WATCH_SECONDS):
                    obj = event["object"]
                    version = obj.metadata.resource_version or version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record([obj], into)
                    if self._stop.is_set():
                        break
            except client.exceptions.ApiException:
                listing = lister(PACKAGE_POD_NAMESPACE, label_selector=self.selector)  # 410: list again
                self._record(listing.items, into)
                version = listing.metadata.resource_version
            finally:
                stream.stop()

    def _record(self, objects: list[Any], into: dict[str, Any]) -> None:
        with self._lock:
            for obj in objects:
                into[obj.metadata.uid] = obj

    def pods(self) -> list[client.V1Pod]:
        """Every stage pod seen (as last seen), oldest first."""
        with self._lock:
            return sorted(self._pods.values(), key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))

    def pods_of(self, name: str) -> list[str]:
        """Uids of the pods seen named `name`."""
        with self._lock:
            return [uid for uid, pod in self._pods.items() if pod.metadata.name == name]

    def config_map(self, name: str) -> client.V1ConfigMap | None:
        """The ConfigMap named `name` (a stage pod's: the same name), as last seen."""
        with self._lock:
            return next((c for c in self._config_maps.values() if c.metadata.name == name), None)

    def stop(self) -> None:
        """End the watches (within one watch slice)."""
        self._stop.set()
