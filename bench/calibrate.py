"""How fast this machine runs noderoll-like Python right now: CPU seconds of a fixed workload. Pure CPU.

The bench's CPU seconds per window are process CPU time, and the same work costs more of it on a
slower or busier host (frequency, a neighbour's cache and memory traffic): on one 2-core VM every
component's CPU per window, the simulator's and the apiserver's included, rose by a fifth between
two sittings on the same day (docs/benchmarks.md). A fixed workload timed before and after each run
lets figures from different sittings be compared: divide by it.
"""

from __future__ import annotations

import json
import statistics
import time

# A pod-like object, as the worker decodes them from watch events and API answers.
_POD = {
    "metadata": {"name": "stage-node-0001", "namespace": "noderoll", "labels": {f"l{i}": f"v{i}" for i in range(8)},
                 "annotations": {"noderoll.io/window": "x" * 64}, "uid": "0" * 36, "resourceVersion": "123456"},
    "spec": {"nodeName": "node-0001", "containers": [{"name": f"c{i}", "image": "registry/agent:1.0",
                                                      "args": ["apply", "config"], "env": [{"name": "A", "value": "B"}]}
                                                     for i in range(3)]},
    "status": {"phase": "Running", "conditions": [{"type": t, "status": "True"} for t in ("Ready", "Initialized")]},
}
_TEXT = json.dumps(_POD)
ROUNDS = 20_000
REPEATS = 5


def fixed_work(rounds: int = ROUNDS) -> int:
    """Decode, walk and encode a pod `rounds` times; returns a checksum so the work is not skipped."""
    total = 0
    for _ in range(rounds):
        pod = json.loads(_TEXT)
        total += sum(len(c["args"]) for c in pod["spec"]["containers"]) + len(pod["metadata"]["labels"])
        total += len(json.dumps(pod["status"], sort_keys=True))
    return total


def cpu_seconds_of_fixed_work(repeats: int = REPEATS) -> float:
    """Median process CPU seconds of `fixed_work` over `repeats` runs (about 0.25 s each on the bench machine)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fixed_work()
        times.append(time.process_time() - start)
    return round(statistics.median(times), 4)
