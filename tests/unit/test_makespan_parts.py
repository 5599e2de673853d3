"""bench/makespan_parts.py: a batched rollout's makespan split into start, batches, turns and tail."""

from __future__ import annotations

import pytest

from bench.histories import WindowStats
from bench.makespan_parts import parts


def window(node: str, started: float, seconds: float, answered: float = 0.0) -> WindowStats:
    return WindowStats(node=node, seconds=seconds, events=0, activities=0, started=started,
                       closed=started + seconds, answered=answered)


def test_the_parts_add_up_to_the_makespan() -> None:
    # Batch 1: one window 100 -> 150 (answered at 149); batch 2: two windows starting 151 and 152,
    # the slower answering at 200.5. Critical path 45 s; the Packages were created at 90; done at 203.
    windows = [window("a", 100, 50, answered=149), window("c", 152, 49, answered=200.5), window("b", 151, 46)]
    got = parts(windows, [1, 2], 45.0, 90.0, 113.0)
    assert got["start_s"] == 10.0
    assert got["batch_overheads_s"] == [4.0, 4.5]
    assert got["batch_start_spreads_s"] == [0.0, 1.0]
    assert got["turns_s"] == [2.0]
    assert got["tail_s"] == 2.5
    assert got["slowest_s"] == [{}, {}]  # no history parts in these windows
    ideal = 2 * 45.0
    excess = got["start_s"] + got["batch_overheads_sum_s"] + got["turns_sum_s"] + got["tail_s"]
    assert ideal + excess == pytest.approx(113.0)


@pytest.mark.parametrize("batches", [[], [1], [1, 1, 1]])
def test_nothing_when_the_windows_do_not_make_the_batches(batches: list[int]) -> None:
    windows = [window("a", 0, 10), window("b", 20, 10)]
    assert parts(windows, batches, 5.0, 0.0, 40.0) == {}


def test_the_slowest_window_of_each_batch_shows_its_parts() -> None:
    from dataclasses import replace

    from bench.window_time import WindowTime

    fast = replace(window("a", 0, 50), time=WindowTime(50, 0.0, 1.0, {"run_stage_pod": 45}, 2.0, 2.0))
    slow = replace(window("b", 0.5, 60), time=WindowTime(60, 0.0, 1.0, {"run_stage_pod": 47}, 9.0, 3.0))
    got = parts([fast, slow], [2], 45.0, 0.0, 62.0)
    assert got["slowest_s"][0]["workflow_tasks_queued"] == 9.0
    assert got["slowest_s"][0]["run_stage_pod"] == 47
