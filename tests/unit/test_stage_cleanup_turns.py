"""`delete_stage_jobs` takes turns: at most `DELETE_CONCURRENCY` collection deletes at once per worker,
and none waits for its turn longer than `DELETE_TURN_WAIT_SECONDS` (activities/stage_cleanup.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from activities import stage_cleanup
from protocol.node_activities import DeleteStageJobsInput


class CountingCore:
    """The two collection deletes, each holding its call for `seconds` and counting calls in flight."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.calls = 0

    def _call(self, *_: Any, **__: Any) -> None:
        with self.lock:
            self.in_flight += 1
            self.calls += 1
            self.most = max(self.most, self.in_flight)
        time.sleep(self.seconds)
        with self.lock:
            self.in_flight -= 1

    delete_collection_namespaced_pod = _call
    delete_collection_namespaced_config_map = _call


@pytest.fixture
def core(monkeypatch: pytest.MonkeyPatch) -> CountingCore:
    fake = CountingCore(seconds=0.05)
    monkeypatch.setattr(stage_cleanup.kube, "core", lambda: fake)
    monkeypatch.setattr(stage_cleanup.kube, "untyped", lambda method, *a, **kw: method(*a, **kw))
    return fake


def deletion(node: str) -> DeleteStageJobsInput:
    return DeleteStageJobsInput(node=node, packages=["driver"])


def test_at_most_the_concurrency_of_collection_deletes_run_at_once(
        core: CountingCore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_cleanup, "_turns", threading.BoundedSemaphore(3))
    with ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(stage_cleanup.delete_stage_jobs, [deletion(f"n{i}") for i in range(20)]))
    assert core.calls == 40  # pods and ConfigMaps of each of the 20
    assert core.most == 3


def test_a_deletion_that_waited_its_longest_goes_ahead(core: CountingCore, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = threading.BoundedSemaphore(1)
    monkeypatch.setattr(stage_cleanup, "_turns", turns)
    monkeypatch.setattr(stage_cleanup, "DELETE_TURN_WAIT_SECONDS", 0.1)
    turns.acquire()  # a turn held (a deletion stuck on a slow API)
    stage_cleanup.delete_stage_jobs(deletion("n1"))
    assert core.calls == 2
    turns.release()  # and the turn it did not get is not given back twice (BoundedSemaphore would raise)


def test_the_default_is_eight_turns_of_at_most_20_seconds() -> None:
    assert (stage_cleanup.DELETE_CONCURRENCY, stage_cleanup.DELETE_TURN_WAIT_SECONDS) == (8, 20.0)
    assert stage_cleanup._turns._initial_value == 8  # type: ignore[attr-defined]
