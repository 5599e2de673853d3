"""Node watches for tests: disruptions per node (`NodeWatch`: cordons, reboots, peak cordoned at once) and
GPU budgets (`CapacityWatch`: GPUs up, nodes of a rack down, drain-ahead's marks around each window).

They watch (no polling, no sleep) the Nodes of a label selector from a background thread and look at
every change the apiserver reports: cordon transitions, new boot ids, the most nodes cordoned
at once, and (`timeline`) every change of the `noderoll.io/status` label with the monotonic time it
was seen (watches of two clusters compare their times). Independent of noderoll's own accounting, so a test can compare
the two.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from kubernetes import client, watch
from kubernetes.client import ApiClient


@dataclass
class _NodeStream(ABC):
    """A watch of the Nodes of `selector` on a background thread, each event handed to `_note`."""

    api: ApiClient
    selector: str
    _watch: watch.Watch = field(default_factory=watch.Watch, kw_only=True)
    _stopped: bool = field(default=False, kw_only=True)
    error: BaseException | None = field(default=None, kw_only=True)

    def run(self) -> None:
        core = client.CoreV1Api(self.api)
        try:
            for event in self._watch.stream(core.list_node, label_selector=self.selector, timeout_seconds=1800):
                self._note(event["type"], event["object"])
        except Exception as err:  # noqa: BLE001 - `stop()` closes the stream under the reader
            if not self._stopped:
                self.error = err

    @abstractmethod
    def _note(self, kind: str, node: client.V1Node) -> None:
        """Take one watch event (ADDED, MODIFIED, DELETED) of a Node."""

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


W = TypeVar("W", bound=_NodeStream)


@contextmanager
def _running(watcher: W, what: str) -> Iterator[W]:
    """`watcher` running for the block; raises if its watch broke before the block ended."""
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        yield watcher
    finally:
        watcher.stop()
        thread.join(timeout=10)
    if watcher.error is not None:
        raise RuntimeError(f"{what} broke before the test ended") from watcher.error


@dataclass
class NodeWatch(_NodeStream):
    """Per-node disruption counts of the Nodes matching `selector`."""

    cordons: dict[str, int] = field(default_factory=dict)
    boot_ids: dict[str, list[str]] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    peak: int = 0
    changes: int = 0
    # (time.monotonic(), node, new noderoll.io/status label) at each change of the label.
    timeline: list[tuple[float, str, str]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

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


@contextmanager
def watching_nodes(api: ApiClient, selector: str) -> Iterator[NodeWatch]:
    """A running `NodeWatch` for the block; raises if the watch broke before the block ended."""
    with _running(NodeWatch(api, selector), "node watch") as nodes:
        yield nodes


@dataclass
class CapacityWatch(_NodeStream):
    """At every change of the Nodes of `selector` (a watch: every state the apiserver reports, not samples):
    the GPUs on nodes up (Ready, uncordoned, not `noderoll.io/status=in-progress`), the nodes of each rack
    down, and drain-ahead's marks around each node's window.

    `lowest`: the fewest GPUs up seen; `rack_peak`: the most nodes of one rack (`rack_label`) down at once;
    `window_peak`: the most nodes in a window (`in-progress`) at once; with `floor`, `starts_below_floor`:
    the windows that started leaving fewer GPUs up than the floor (node, GPUs up then: a floor broken by a
    window noderoll started, not by someone else's cordon); `windows`: windows seen per node (a new `in-progress`); `windows_unmarked`: nodes whose window
    started while they did not carry the `noderoll.io/upcoming` label (and, with `want_taint`, its
    taint); `marks_seen`: nodes ever seen marked; `marked_now()`: nodes marked at the latest change.
    """

    # The fleet's size: GPUs up are counted once every node was listed (not from a half-read fleet).
    nodes: int
    rack_label: str = ""
    want_taint: bool = False
    floor: int = 0
    starts_below_floor: list[tuple[str, int]] = field(default_factory=list)
    lowest: int | None = None
    rack_peak: int = 0
    window_peak: int = 0
    changes: int = 0
    windows: dict[str, int] = field(default_factory=dict)
    windows_unmarked: list[str] = field(default_factory=list)
    marks_seen: set[str] = field(default_factory=set)
    _state: dict[str, tuple[int, bool, str, bool, bool]] = field(default_factory=dict)
    _racks: dict[str, str] = field(default_factory=dict)

    def _note(self, kind: str, node: client.V1Node) -> None:
        name = node.metadata.name
        self.changes += 1
        if kind == "DELETED":
            self._state.pop(name, None)
            return
        labels = node.metadata.labels or {}
        allocatable = (node.status.allocatable or {}) if node.status else {}
        gpus = int(allocatable.get("nvidia.com/gpu", "0"))
        ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
        status = labels.get("noderoll.io/status", "")
        marked = labels.get("noderoll.io/upcoming") == "true"
        tainted = any(t.key == "noderoll.io/upcoming" and t.effect == "PreferNoSchedule"
                      for t in (node.spec.taints or []))
        before = self._state.get(name)
        if status == "in-progress" and (before is None or before[2] != "in-progress"):
            self.windows[name] = self.windows.get(name, 0) + 1
            if not marked or (self.want_taint and not tainted):
                self.windows_unmarked.append(name)
        if marked:
            self.marks_seen.add(name)
        self._state[name] = (gpus, ready and not node.spec.unschedulable, status, marked, tainted)
        self._racks[name] = labels.get(self.rack_label, "") if self.rack_label else ""
        if len(self._state) >= self.nodes:
            up = sum(g for g, ok, s, _, _ in self._state.values() if ok and s != "in-progress")
            self.lowest = up if self.lowest is None else min(self.lowest, up)
            # A window on a node already down (cordoned by someone else, NotReady) takes nothing away.
            started = status == "in-progress" and before is not None and before[2] != "in-progress" and before[1]
            if started and up < self.floor:
                self.starts_below_floor.append((name, up))
        down: dict[str, int] = {}
        for other, (_, ok, s, _, _) in self._state.items():
            if not ok or s == "in-progress":
                down[self._racks[other]] = down.get(self._racks[other], 0) + 1
        self.rack_peak = max([self.rack_peak, *down.values()])
        self.window_peak = max(self.window_peak, sum(1 for _, _, s, _, _ in self._state.values() if s == "in-progress"))

    def in_windows_now(self) -> list[str]:
        """Nodes whose `noderoll.io/status` is `in-progress` at the latest change."""
        return sorted(n for n, (_, _, status, _, _) in self._state.items() if status == "in-progress")

    def completed_now(self) -> list[str]:
        """Nodes whose `noderoll.io/status` is `complete` at the latest change."""
        return sorted(n for n, (_, _, status, _, _) in self._state.items() if status == "complete")

    def marked_now(self) -> list[str]:
        """Nodes carrying drain-ahead's label or taint at the latest change."""
        return sorted(n for n, (_, _, _, marked, tainted) in self._state.items() if marked or tainted)


@contextmanager
def watching_capacity(api: ApiClient, selector: str, nodes: int, rack_label: str = "",
                      want_taint: bool = False, floor: int = 0) -> Iterator[CapacityWatch]:
    """A running `CapacityWatch` for the block; raises if the watch broke before the block ended."""
    with _running(CapacityWatch(api, selector, nodes, rack_label, want_taint, floor), "capacity watch") as watcher:
        yield watcher
