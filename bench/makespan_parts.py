"""Where a batched rollout's makespan goes beyond its ideal: the start, each batch's slowest window,
the fleet's turns between batches and the tail. Pure.

The overhead ratio divides the makespan by the batches' ideal (one node's critical path per batch),
so its excess is the sum of:

* `start_s`: from the Packages' creation to the first window's start (the bridge seeing them, the
  fleet's first plan and its first hand-over);
* `batch_overheads_s[i]`: batch i from its first window's start to its last window's answer to the
  fleet, minus the critical path (its slowest window, and how late its last window began:
  `batch_start_spreads_s[i]`);
* `turns_s[i]`: from batch i's last answer to batch i+1's first start (the fleet's workflow task on
  the answer, its next batch's plan and hand-over, the node workflow's first task);
* `slowest_s[i]`: where batch i's slowest window (the one answering last) spent its time
  (`bench.window_time` parts), to tell a batch's contention from the window's own overhead;
* `tail_s`: from the last answer to the moment every Package said Complete (the bench's poll and the
  bridge's status write).

A batch is recovered from the windows' start times: batches run one after another (each waits for
the one before), so sorted by start the windows split into the batch sizes in order; `parts` returns
nothing when the windows do not add up to the batches (a node that took two windows). The bench asks
for them only for batches without jitter: `rolling` has no batch barriers, and with jitter each node
has its own critical path.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from bench.histories import WindowStats
from bench.window_time import median_breakdown


def _groups(windows: Sequence[WindowStats], batches: Sequence[int]) -> list[list[WindowStats]]:
    """The windows of each batch, in order; [] when the windows do not make the batches."""
    if not windows or not batches or sum(batches) != len(windows):
        return []
    ordered = sorted(windows, key=lambda w: w.started)
    starts = [0, *accumulate(batches)][:-1]
    return [ordered[at:at + size] for at, size in zip(starts, batches, strict=True)]


def _spans(groups: Sequence[Sequence[WindowStats]]) -> list[tuple[float, float]]:
    return [(min(w.started for w in g), max(w.answer_at for w in g)) for g in groups]


def spans(windows: Sequence[WindowStats], batches: Sequence[int]) -> list[tuple[float, float]]:
    """Each batch's first window start and last answer (epoch seconds); [] when the windows do not
    make the batches."""
    return _spans(_groups(windows, batches))


def parts(windows: Sequence[WindowStats], batches: Sequence[int], critical_s: float, started_epoch: float,
          makespan_s: float) -> dict[str, Any]:
    """The makespan's parts (module docstring), rounded to 0.01 s; {} when they cannot be told."""
    groups = _groups(windows, batches)
    if not groups:
        return {}
    batch_spans = _spans(groups)
    firsts = [first for first, _ in batch_spans]
    lasts = [last for _, last in batch_spans]
    overheads = [last - first - critical_s for first, last in zip(firsts, lasts, strict=True)]
    turns = [firsts[i + 1] - lasts[i] for i in range(len(groups) - 1)]
    result: dict[str, Any] = {
        "start_s": round(firsts[0] - started_epoch, 2),
        "batch_overheads_s": [round(x, 2) for x in overheads],
        "batch_start_spreads_s": [round(max(w.started for w in g) - min(w.started for w in g), 2) for g in groups],
        "turns_s": [round(x, 2) for x in turns],
        "tail_s": round(started_epoch + makespan_s - lasts[-1], 2),
        "batch_overheads_sum_s": round(sum(overheads), 2),
        "turns_sum_s": round(sum(turns), 2),
    }
    slowest = [max(g, key=lambda w: w.answer_at) for g in groups]
    result["slowest_s"] = [median_breakdown([w.time]) if w.time is not None else {} for w in slowest]
    result["turn_median_s"] = round(statistics.median(turns), 2) if turns else None
    return result
