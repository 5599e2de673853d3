"""What a benchmark rollout costs the machine and the cluster: CPU seconds per component, objects kept. I/O.

CPU: `cpu_seconds(pid)` is the CPU time of a process tree, the process itself, its live descendants
and every descendant already reaped (the kernel adds those to their parent's `children` times), so
fleetsim's count includes its agent zygote and every agent run and step forked from it. A rollout's
share per component is the difference of two snapshots divided by the machine's CPU time over the
same interval (wall seconds x cores): what the simulator costs next to what noderoll costs.

Objects: the Jobs, Pods and ConfigMaps of the stage pod namespace and the Events of every
namespace, counted by a one-item list each (`remainingItemCount`), before and after a rollout.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import psutil
from kubernetes import client, config

from api.keys import PACKAGE_POD_NAMESPACE


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process tree rooted at `pid` (reaped children included); 0 when gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


@dataclass
class CpuSnapshot:
    """CPU seconds per named process tree at one moment."""

    at: float
    seconds: dict[str, float] = field(default_factory=dict)


def snapshot(pids: Mapping[str, int | list[int]]) -> CpuSnapshot:
    """CPU seconds of each named process tree (a list of pids is summed: several workers)."""
    seconds = {}
    for name, pid in pids.items():
        seconds[name] = sum(cpu_seconds(p) for p in (pid if isinstance(pid, list) else [pid]))
    return CpuSnapshot(time.monotonic(), seconds)


def cpu_used(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """CPU seconds each named process tree used between two snapshots (never negative). Pure."""
    return {name: max(0.0, after.seconds.get(name, 0.0) - before.seconds.get(name, 0.0)) for name in after.seconds}


def cpu_report(before: CpuSnapshot, after: CpuSnapshot, cores: int) -> dict[str, dict[str, float]]:
    """`{"seconds": {name: CPU s}, "share": {name: fraction of the machine}}` between two snapshots. Pure."""
    wall = max(1e-9, after.at - before.at)
    used = cpu_used(before, after)
    return {
        "seconds": {name: round(value, 1) for name, value in used.items()},
        "share": {name: round(value / (wall * max(1, cores)), 3) for name, value in used.items()},
    }


def per_window(cpu_seconds: dict[str, float], windows: int) -> dict[str, float]:
    """CPU seconds per window by component, and their sum as `all`. Pure."""
    per = {name: round(value / windows, 4) for name, value in cpu_seconds.items()} if windows else {}
    return {**per, "all": round(sum(cpu_seconds.values()) / windows, 4)} if windows else {}


def cores_busy(cpu_seconds: dict[str, float], seconds: float) -> float | None:
    """The cores the components kept busy on average over `seconds` of wall time. Pure."""
    return round(sum(cpu_seconds.values()) / seconds, 2) if seconds > 0 else None


def _count(call: object, *args: object) -> int:
    answer = call(*args, limit=1)  # type: ignore[operator]
    meta = answer.metadata
    return len(answer.items) + int(getattr(meta, "remaining_item_count", None) or 0)


def count_objects(kubeconfig: str) -> dict[str, int]:
    """Stage namespace Jobs, Pods and ConfigMaps, and Events of all namespaces, as the apiserver holds them now."""
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        return {
            "jobs": _count(batch.list_namespaced_job, PACKAGE_POD_NAMESPACE),
            "pods": _count(core.list_namespaced_pod, PACKAGE_POD_NAMESPACE),
            "configmaps": _count(core.list_namespaced_config_map, PACKAGE_POD_NAMESPACE),
            "events": _count(core.list_event_for_all_namespaces),
        }
    finally:
        api.close()
