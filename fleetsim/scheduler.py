"""Timers on one thread, work on a small thread pool: how fleetsim does 1,000 nodes on 2 cores. Threads.

Heartbeats, grace periods, reboots and timed pod completions are all `call_later` timers in one
heap; the work they trigger runs on a bounded pool, so the thread count does not grow with the fleet.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)


class Scheduler:
    """A timer heap served by one thread, dispatching to a ThreadPoolExecutor."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleetsim")
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="fleetsim-timers", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], None]) -> None:
        """Run fn on the pool now; exceptions are logged, never lost."""
        if not self._stopped:
            self.pool.submit(self._guard, fn)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run fn on the pool after `delay` seconds."""
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), fn))
            self._cond.notify()

    def stop(self) -> None:
        """Drop pending timers and wait for running work to end."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=5)
        self.pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _guard(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("fleetsim task failed")

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                due: list[Callable[[], None]] = []
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
                if not due:
                    timeout = self._heap[0][0] - now if self._heap else None
                    self._cond.wait(timeout)
                    continue
            for fn in due:
                self.submit(fn)
