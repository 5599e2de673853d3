"""How good the fleet's ETA was in a bench rollout (issue 27): sampled while it ran, judged at its end.

While the rollout runs, `EtaSampler` asks the fleet for its `progress` every `SAMPLE_SECONDS` and keeps
(time, batch number, the ETA's seconds left). Once the last node is done, `eta_accuracy` takes the
first sample after each batch ended (the batch number moved on) and compares what it predicted with
the real end: `error` = (predicted end − real end) / (real end − sample time), the error on the time
that was left (0.25: the ETA said 25 % more than it took); `error_of_makespan` divides the same
difference by the whole rollout instead. The done-when figure of issue 27 is the first batch's.

A sampled run (issue 45: the first W windows of a 10,000-node wave, then a halt) never sees the wave's
end. Its ETA is judged against the end extrapolated from the sample (`extrapolated_end`): after the
exponential ramp every batch has the budget's size, so the wave goes on at the rate the sample's full
batches ran (their windows over the time from the first one's start to the last one's answer), from the
sample's last answer, for the nodes left.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.histories import WindowStats
from planning.views.fleet_status import FleetProgress

SAMPLE_SECONDS = 2.0


@dataclass(frozen=True)
class EtaSample:
    """One `progress` answer: when (Unix time), the batch out, and the ETA's seconds left (None: none)."""

    at: float
    batch: int
    seconds_left: float | None
    source: str = ""


@dataclass
class EtaSampler:
    """Samples a fleet's ETA in the background (`run` until cancelled)."""

    ask: Callable[[], Awaitable[FleetProgress | None]]
    samples: list[EtaSample] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a query that fails (the fleet not started yet) is no sample
                progress = await self.ask()
                if progress is not None:
                    eta = progress.eta
                    self.samples.append(EtaSample(time.time(), progress.batch_number,
                                                  eta.seconds_left if eta is not None and eta.finish_at else None,
                                                  eta.source if eta is not None else ""))
            await asyncio.sleep(SAMPLE_SECONDS)


def eta_accuracy(samples: list[EtaSample], started: float, ended: float) -> dict[str, Any]:
    """Per batch boundary, the first estimate after it against the real end (module docstring). Pure."""
    judged = []
    seen = 0
    for sample in samples:
        if sample.batch <= seen or sample.seconds_left is None or sample.at >= ended:
            continue
        seen = sample.batch
        left = ended - sample.at
        predicted = sample.at + sample.seconds_left
        judged.append({
            "after_batch": sample.batch - 1, "at_s": round(sample.at - started, 1),
            "predicted_end_s": round(predicted - started, 1), "real_end_s": round(ended - started, 1),
            "error": round((predicted - ended) / left, 3) if left > 0 else None,
            "error_of_makespan": round((predicted - ended) / (ended - started), 3),
            "source": sample.source,
        })
    first = next((j for j in judged if j["after_batch"] >= 1), None)
    return {"samples": len(samples), "after_batches": judged,
            "first_batch_error": first["error"] if first else None}


def extrapolated_end(windows: list[WindowStats], batches: list[int], nodes: int) -> float | None:
    """When a sampled wave would end (module docstring), epoch seconds; None without a full batch. Pure."""
    if not windows or not batches:
        return None
    ordered = sorted(windows, key=lambda w: w.started)
    full = max(batches)
    spans: list[tuple[float, float, int]] = []
    position = 0
    for size in batches:
        part = ordered[position:position + size]
        position += size
        if part and size == full:
            spans.append((min(w.started for w in part), max(w.answer_at for w in part), len(part)))
    if len(spans) < 2:
        return None
    steady = sum(n for _, _, n in spans)
    rate = steady / max(1e-9, spans[-1][1] - spans[0][0])
    last = max(w.answer_at for w in ordered)
    return last + max(0, nodes - len(ordered)) / rate
