"""bench/cpu_timeline.py: the machine's CPU sampled over a rollout, cut by batch."""

from __future__ import annotations

import subprocess
import sys

from bench.cpu_timeline import INTERVAL, CpuTimeline, Sample, per_batch


def samples(start: float, busy: list[float], worker: float = 0.2) -> list[Sample]:
    return [Sample(start + INTERVAL * (i + 1), b, {"worker": worker, "fleetsim": 0.05}) for i, b in enumerate(busy)]


def test_saturated_seconds_and_bursts_per_batch() -> None:
    # Batch 1 from 100 to 103 s: idle, then 4 saturated samples (1 s), idle, one saturated sample
    # (0.25 s: too short to be a burst, still counted as saturated), idle.
    busy = [0.1, 0.2, 0.95, 1.0, 0.92, 0.99, 0.3, 0.2, 0.97, 0.1, 0.1, 0.1]
    got = per_batch(samples(100.0, busy), [(100.0, 103.0), (200.0, 201.0)])
    first = got[0]
    assert first["saturated_s"] == 1.25
    assert first["busy"] == round(sum(busy) / len(busy), 3)
    assert len(first["bursts"]) == 1
    burst = first["bursts"][0]
    assert burst["at_s"] == 0.5 and burst["seconds"] == 1.0
    assert burst["cpu_s"] == {"worker": 0.8, "fleetsim": 0.2}
    assert got[1] == {}  # no sample inside the second batch


def test_a_burst_at_the_end_of_a_batch_counts() -> None:
    got = per_batch(samples(0.0, [0.1, 0.95, 0.95, 0.95]), [(0.0, 2.0)])
    assert got[0]["bursts"][0]["seconds"] == 0.75


def test_the_sampler_sees_a_busy_process() -> None:
    burner = subprocess.Popen([sys.executable, "-c", "import time\nwhile time.process_time() < 1.0: pass"])
    try:
        timeline = CpuTimeline({"burner": burner.pid})
        timeline.start()
        burner.wait(timeout=10)
        taken = timeline.stop()
    finally:
        burner.kill()
    assert len(taken) >= 3
    # The tree's CPU seconds: most of its 1 s (the interval in which it exited is lost: it is gone).
    assert sum(s.seconds["burner"] for s in taken) > 0.5
    assert max(s.busy for s in taken) > 0.4  # one of the machine's cores at least
