"""Benchmark: fleetsim's CPU per stage pod. Starts processes, API I/O.

Runs `noderoll sim --nodes N` as its own process, creates one stage pod per node (the shape
noderoll creates: the package copy, then `apply`, `apply-check`, `config`, `config-check` of
`bench-sleep` with 0 s stages: four agent runs), waits until every pod ended, and reports the CPU
seconds of the simulator's whole process tree (its agent zygote, every agent run and every step
included) per pod and per agent container, after subtracting what the simulator spends idle over
the same time (measured first). Wall time from the first pod created to the last one ended is
reported too. Use `--pod-startup-seconds 0` to time the simulator, not its modelled start-up.

    python -m bench.fleetsim_pods --kubeconfig /tmp/stack/kubeconfig --nodes 50 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from activities import stage_pod
from api.keys import PACKAGE_POD_NAMESPACE
from bench.procs import start_sim
from bench.resources import cpu_seconds
from bench.scenario import IMAGE, PACKAGES_DIR
from fleetsim.nodes import node_name
from protocol.node_activities import StageJob

MODES = ["apply", "apply-check", "config", "config-check"]
IDLE_SECONDS = 10.0


@dataclass(frozen=True)
class PodCost:
    """One measurement: N pods of 4 agent runs each."""

    pods: int
    agent_runs: int
    cpu_seconds: float
    idle_cpu_seconds: float
    cpu_ms_per_pod: float
    cpu_ms_per_agent_run: float
    wall_seconds: float


def pod_manifest(name: str, node: str) -> dict[str, Any]:
    """A stage pod of four modes of bench-sleep pinned to `node` (noderoll's manifest, no ConfigMap)."""
    job = StageJob(package="bench-sleep", version="1.0.0", node=node, mode="apply", image=IMAGE, modes=MODES,
                   env=[{"name": "BENCH_STAGE_SECONDS", "value": "0"}])
    spec = stage_pod.pod_spec(job, name, stage_pod.StagePodIdentity(), stage_pod.StagePodSettings())
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": PACKAGE_POD_NAMESPACE, "labels": stage_pod.labels(job)},
            "spec": spec}


def _finished(kube: Any, selector: str) -> int:
    listing = kube.request("GET", f"/api/v1/namespaces/{PACKAGE_POD_NAMESPACE}/pods",
                           query={"labelSelector": selector})
    return sum(1 for p in listing.get("items", []) if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"))


def measure(kubeconfig: str, nodes: int, startup: float | None, sim_dir: str | None = None) -> PodCost:
    """One round: a fresh simulator (started in `sim_dir`: another checkout's fleetsim), N stage pods."""
    from fleetsim.kube import Kube

    prefix = f"pods-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "cli", "sim", "--nodes", str(nodes), "--kubeconfig", kubeconfig,
            "--name-prefix", prefix, "--image-store", str(PACKAGES_DIR), "--delete-on-exit",
            "--workers", str(nodes + 8)]
    if startup is not None:
        argv += ["--pod-startup-seconds", f"{startup:g}"]
    # fleetsim's own names (zero-padded to at least 3 digits: a hand-made `-00` matched no node).
    names = [node_name(prefix, i, nodes) for i in range(nodes)]
    selector = f"noderoll.io/node in ({','.join(names)})"
    proc = start_sim(argv, cwd=sim_dir)
    kube = Kube(kubeconfig)
    try:
        before = cpu_seconds(proc.pid)
        time.sleep(IDLE_SECONDS)
        idle_rate = (cpu_seconds(proc.pid) - before) / IDLE_SECONDS
        before, started = cpu_seconds(proc.pid), time.monotonic()
        for i, node in enumerate(names):
            kube.request("POST", f"/api/v1/namespaces/{PACKAGE_POD_NAMESPACE}/pods", pod_manifest(f"{prefix}-pod-{i}", node))
        while _finished(kube, selector) < nodes:
            time.sleep(0.5)
        wall = time.monotonic() - started
        used = cpu_seconds(proc.pid) - before
        idle = idle_rate * wall
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{PACKAGE_POD_NAMESPACE}/pods", query={"labelSelector": selector})
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
    runs = nodes * len(MODES)
    net = max(0.0, used - idle)
    return PodCost(nodes, runs, round(used, 2), round(idle, 2), round(net / nodes * 1000, 1),
                   round(net / runs * 1000, 1), round(wall, 1))


def main() -> int:
    """CLI: one JSON line per round."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pod-startup-seconds", type=float, default=None,
                        help="passed to `noderoll sim` (omit for a simulator without the flag)")
    parser.add_argument("--sim-dir", help="run `noderoll sim` from this source tree (an older fleetsim, to compare)")
    args = parser.parse_args()
    for _ in range(args.rounds):
        cost = measure(args.kubeconfig, args.nodes, args.pod_startup_seconds, args.sim_dir)
        print(json.dumps(asdict(cost)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
