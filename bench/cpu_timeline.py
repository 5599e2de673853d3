"""The machine's CPU over a rollout, sampled (`noderoll bench --cpu-timeline`): when the cores were
saturated, and by which component. The sampler does I/O; `per_batch` is pure.

The run's CPU seconds per component (`bench/resources.py`) say what a window costs on average; a
batched rollout's windows move in step, so its cost comes in bursts at the steps they take together
(start, end of the stage pods, the node back, the close), and a window waits when its step falls in
one. `CpuTimeline` samples, every `INTERVAL` in a thread, the machine's busy share (`/proc/stat`:
everything but idle and iowait) and each component's process-tree CPU seconds. `per_batch` cuts the
samples by batch (from its first window's start to its last answer, `bench.makespan_parts.spans`)
into: the seconds with the cores at least `SATURATED` busy, the mean busy share, and the bursts of
at least `MIN_BURST` seconds (offset from the batch's start, length, core-seconds per component).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import resources

INTERVAL = 0.25
SATURATED = 0.9
MIN_BURST = 0.5


@dataclass(frozen=True)
class Sample:
    """The interval ending at `at` (epoch seconds): the machine's busy share and each component's CPU seconds."""

    at: float
    busy: float
    seconds: dict[str, float] = field(default_factory=dict)


def _proc_stat() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait


class CpuTimeline:
    """Samples in a thread from `start()` to `stop()` (which returns the samples)."""

    def __init__(self, pids: Mapping[str, int | list[int]]) -> None:
        self.pids = pids
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-timeline", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.samples

    def _run(self) -> None:
        total, idle = _proc_stat()
        last = resources.snapshot(self.pids)
        while not self._stop.wait(INTERVAL):
            now_total, now_idle = _proc_stat()
            busy = 1.0 - (now_idle - idle) / max(1, now_total - total)
            total, idle = now_total, now_idle
            current = resources.snapshot(self.pids)
            self.samples.append(Sample(time.time(), round(busy, 3), resources.cpu_used(last, current)))
            last = current


def per_batch(samples: Sequence[Sample], spans: Sequence[tuple[float, float]]) -> list[dict[str, Any]]:
    """Per batch span (epoch start, end): saturated seconds, mean busy share, bursts (module docstring)."""
    rows = []
    for start, end in spans:
        # A sample covers the INTERVAL ending at its `at`.
        inside = [s for s in samples if start < s.at <= end]
        if not inside:
            rows.append({})
            continue
        bursts: list[dict[str, Any]] = []
        run: list[Sample] = []
        for sample in [*inside, None]:
            if sample is not None and sample.busy >= SATURATED:
                run.append(sample)
                continue
            if run and len(run) * INTERVAL >= MIN_BURST:
                cpu: Counter[str] = Counter()
                for s in run:
                    cpu.update(s.seconds)
                bursts.append({"at_s": round(run[0].at - INTERVAL - start, 1), "seconds": round(len(run) * INTERVAL, 2),
                               "cpu_s": {k: round(v, 2) for k, v in cpu.most_common()}})
            run = []
        rows.append({"saturated_s": round(sum(INTERVAL for s in inside if s.busy >= SATURATED), 2),
                     "busy": round(sum(s.busy for s in inside) / len(inside), 3), "bursts": bursts})
    return rows
