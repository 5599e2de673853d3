"""A Node watch that counts disruptions per node: cordons, reboots (boot-id changes), peak cordoned at once.

It watches (no polling, no sleep) the Nodes of a label selector from a background thread and, at every
change, records per node the cordon transitions (schedulable -> unschedulable) and every new boot id,
and the most nodes cordoned at the same time, and (`timeline`) every change of the node's
`noderoll.io/status` label with the monotonic time it was seen (watches of two clusters compare their
times: no window of one began before the other was complete). Independent of noderoll's own
accounting, so a test can compare the two.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kubernetes import client, watch
from kubernetes.client import ApiClient


@dataclass
class NodeWatch:
    """Per-node disruption counts of the Nodes matching `selector`."""

    api: ApiClient
    selector: str
    cordons: dict[str, int] = field(default_factory=dict)
    boot_ids: dict[str, list[str]] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    peak: int = 0
    changes: int = 0
    # (time.monotonic(), node, new noderoll.io/status label) at each change of the label.
    timeline: list[tuple[float, str, str]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    _watch: watch.Watch = field(default_factory=watch.Watch)
    _stopped: bool = False
    error: BaseException | None = None

    def run(self) -> None:
        core = client.CoreV1Api(self.api)
        try:
            for event in self._watch.stream(core.list_node, label_selector=self.selector, timeout_seconds=1800):
                self._note(event["type"], event["object"])
        except Exception as err:  # noqa: BLE001 - `stop()` closes the stream under the reader
            if not self._stopped:
                self.error = err

    def _note(self, kind: str, node: client.V1Node) -> None:
        name = node.metadata.name
        self.changes += 1
        label = (node.metadata.labels or {}).get("noderoll.io/status", "")
        if kind != "DELETED" and label != self.labels.get(name, ""):
            self.labels[name] = label
            self.timeline.append((time.monotonic(), name, label))
        if kind != "DELETED" and node.spec.unschedulable:
            if name not in self.cordoned:
                self.cordons[name] = self.cordons.get(name, 0) + 1
            self.cordoned.add(name)
        else:
            self.cordoned.discard(name)
        self.peak = max(self.peak, len(self.cordoned))
        info = node.status.node_info if node.status else None
        boot = info.boot_id if info else ""
        seen = self.boot_ids.setdefault(name, [])
        if boot and (not seen or seen[-1] != boot):
            seen.append(boot)

    def first(self, label: str) -> float | None:
        """When any node first showed `label` (None: never)."""
        return min((t for t, _n, value in self.timeline if value == label), default=None)

    def last(self, label: str) -> float | None:
        """When the last node to show `label` first showed it (None: none did)."""
        firsts: dict[str, float] = {}
        for at, node, value in self.timeline:
            if value == label:
                firsts.setdefault(node, at)
        return max(firsts.values(), default=None)

    def reboots(self, node: str) -> int:
        """Boot-id changes seen on `node`."""
        return max(0, len(self.boot_ids.get(node, [])) - 1)

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


@contextmanager
def watching_nodes(api: ApiClient, selector: str) -> Iterator[NodeWatch]:
    """A running `NodeWatch` for the block; raises if the watch broke before the block ended."""
    nodes = NodeWatch(api, selector)
    thread = threading.Thread(target=nodes.run, daemon=True)
    thread.start()
    try:
        yield nodes
    finally:
        nodes.stop()
        thread.join(timeout=10)
    if nodes.error is not None:
        raise RuntimeError("node watch broke before the test ended") from nodes.error
