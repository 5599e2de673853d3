"""Benchmark: CPU and memory of `noderoll sim` holding N idle nodes Ready. Starts processes, API I/O.

Runs the simulator as its own process (as an operator would), waits until every node is
registered, then samples the process for `seconds` (one heartbeat period covers every node's Lease
renewal once). Reports registration time, average CPU (percent of one core), peak RSS and the
nodes' Ready count as the API server sees it.

    python -m bench.fleetsim_idle --kubeconfig /tmp/stack/kubeconfig --nodes 100 1000
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass

import psutil

from bench.procs import start_sim


@dataclass(frozen=True)
class IdleResult:
    """One measurement."""

    nodes: int
    register_seconds: float
    idle_seconds: float
    cpu_percent_of_one_core: float
    rss_mib_peak: float
    ready_nodes: int


def _ready_nodes(kubeconfig: str, prefix: str) -> int:
    from fleetsim.kube import Kube

    listing = Kube(kubeconfig).request("GET", "/api/v1/nodes", query={"labelSelector": f"fleetsim.noderoll.io/prefix={prefix}"})
    return sum(
        1 for node in listing.get("items", [])
        for cond in node["status"].get("conditions", []) if cond["type"] == "Ready" and cond["status"] == "True"
    )


def measure_idle(kubeconfig: str, nodes: int, seconds: float = 60.0) -> IdleResult:
    """Start `noderoll sim --nodes N`, measure it idle for `seconds`, stop it (nodes deleted)."""
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "cli", "sim", "--nodes", str(nodes), "--kubeconfig", kubeconfig,
            "--name-prefix", prefix, "--delete-on-exit"]
    started = time.monotonic()
    proc = start_sim(argv)
    try:
        register = time.monotonic() - started
        ps = psutil.Process(proc.pid)
        cpu_before = sum(ps.cpu_times()[:2])
        t0 = time.monotonic()
        peak = 0
        while time.monotonic() - t0 < seconds:
            peak = max(peak, ps.memory_info().rss)
            time.sleep(1.0)
        cpu = (sum(ps.cpu_times()[:2]) - cpu_before) / (time.monotonic() - t0) * 100
        ready = _ready_nodes(kubeconfig, prefix)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
    return IdleResult(nodes, round(register, 1), seconds, round(cpu, 1), round(peak / 2**20, 1), ready)


def main() -> int:
    """CLI: one JSON line per fleet size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--seconds", type=float, default=60.0, help="idle window (default: one heartbeat period)")
    args = parser.parse_args()
    for count in args.nodes:
        print(json.dumps(asdict(measure_idle(args.kubeconfig, count, args.seconds))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
