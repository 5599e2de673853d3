"""The shared state of one simulated fleet: options, API client, timers, nodes. Holds no logic.

Every fleetsim module works on a `SimContext`, so that the kubelet, node and stage-pod code stay
separate modules without a class hierarchy.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from fleetsim.agents import AgentRun, AgentZygote
from fleetsim.faults import Faults
from fleetsim.images import ImageStore
from fleetsim.kube import Kube
from fleetsim.scheduler import Scheduler

SIM_LABEL = "fleetsim.noderoll.io/simulated"
PREFIX_LABEL = "fleetsim.noderoll.io/prefix"
# Topology labels of simulated nodes (`--racks`, `--domains`): contiguous blocks of node indexes.
RACK_LABEL = "fleetsim.noderoll.io/rack"
DOMAIN_LABEL = "fleetsim.noderoll.io/nvlink-domain"
RUN_SECONDS_ANNOTATION = "fleetsim.noderoll.io/run-seconds"


@dataclass
class FleetOptions:
    """How to simulate: size, names, where sandboxes and images are, timings."""

    nodes: int
    kubeconfig: str | None = None
    name_prefix: str = "sim"
    labels: dict[str, str] = field(default_factory=dict)
    # Taints (API form) every Node is created with, like kubelet's --register-with-taints.
    register_taints: list[dict[str, str]] = field(default_factory=list)
    sandbox_dir: Path = Path("/tmp/noderoll-fleetsim")
    image_stores: list[Path] = field(default_factory=list)
    faults: Faults = field(default_factory=Faults)
    reboot_seconds: float = 3.0
    # Each node's reboots and stages take its own factor of their time, drawn once per node in
    # [1 - p/100, 1 + p/100] (`jitter_factor`): real GPU windows vary from minutes to tens of minutes.
    jitter_percent: float = 0.0
    heartbeat_seconds: float = 60.0
    # Grace periods are honoured up to this many seconds so tests need not wait 30 s per pod.
    max_grace_seconds: float = 30.0
    workers: int = 8
    delete_nodes_on_stop: bool = False
    # Seconds between a stage pod being bound and its containers starting (what a kubelet spends on
    # the pod sandbox and image pulls); 0 starts it at once.
    pod_startup_seconds: float = 1.0
    # GPUs per node (allocatable `nvidia.com/gpu`), cycled over the node indexes: [4, 8] alternates;
    # 0 gives a node no GPU resource.
    gpus: list[int] = field(default_factory=lambda: [8])
    # Racks and NVLink domains the nodes are spread over (contiguous blocks; 0: no such label), and
    # the label key of the rack.
    racks: int = 0
    domains: int = 0
    rack_label: str = RACK_LABEL


@dataclass
class SimNode:
    """One simulated node as fleetsim remembers it."""

    name: str
    index: int
    boot_id: str
    uid: str = ""
    ready: bool = True
    rebooting: bool = False
    pod_counter: int = 0
    # The node's time factor (FleetOptions.jitter_percent): its reboots last reboot_seconds times it, and
    # its stage containers see it as FLEETSIM_TIME_FACTOR (bench-sleep multiplies its sleep by it).
    time_factor: float = 1.0


@dataclass
class SimContext:
    """Everything the simulator's modules share."""

    options: FleetOptions
    kube: Kube
    scheduler: Scheduler
    images: ImageStore
    nodes: dict[str, SimNode] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: set[str] = field(default_factory=set)  # pod uids fleetsim has started
    terminating: set[str] = field(default_factory=set)  # pod uids being terminated
    syncing: set[str] = field(default_factory=set)  # pod uids whose Ready condition is posted again soon
    runs: dict[str, str] = field(default_factory=dict)  # pod uid -> start of its timed run (run-seconds)
    procs: dict[str, AgentRun] = field(default_factory=dict)  # running agents by pod uid
    agents: AgentZygote = field(default_factory=AgentZygote)  # forks every agent run
    stopping: threading.Event = field(default_factory=threading.Event)
    # The resourceVersion the pod watch has delivered up to ("" before its first list).
    pods_version: str = ""

    def sandbox(self, node: str) -> Path:
        """The node's host root: `<sandbox-dir>/<node>/`."""
        return self.options.sandbox_dir / node


def jitter_factor(node: str, percent: float) -> float:
    """The time factor of `node` for a jitter of `percent` (pure, the same on every run): uniform in
    [1 - percent/100, 1 + percent/100], from a generator seeded with the node's name."""
    if percent <= 0:
        return 1.0
    spread = min(percent, 100.0) / 100.0
    return round(random.Random(f"fleetsim-jitter:{node}").uniform(1.0 - spread, 1.0 + spread), 4)
