"""Heartbeats of long sync activities: wait slices and a background keep-alive. Activity context, no I/O.

A wait longer than the heartbeat timeout would make Temporal declare a healthy activity lost and
start it again; every wait loop therefore sleeps (or watches) at most a third of the timeout.

That alone is not enough under CPU saturation: one blocking Kubernetes call (a list, a create, an
eviction of each pod in turn) took longer than the 15 s heartbeat timeout at 1,000 nodes, and ~1,500
attempts were declared lost and retried (docs/benchmarks.md). A sync activity runs in a worker
thread, and temporalio's threaded heartbeat is thread-safe (it hands the call to the worker's event
loop), so `keep_alive` heartbeats from a background thread, carrying the activity's context, while
the activity blocks. Raising the heartbeat timeout instead would also delay the detection of a
crashed worker (the thread dies with the process, so a crash is still seen within one timeout);
a call that hangs for good is cut by the client's request timeout (`kube`).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from temporalio import activity

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def wait_slice(preferred: float) -> float:
    """`preferred` seconds, shortened to a third of the activity's heartbeat timeout (at least 0.2 s)."""
    timeout = _heartbeat_seconds()
    if not timeout:
        return preferred
    return max(0.2, min(preferred, timeout / 3))


def watch_slice(preferred: float, kept_alive: float) -> float:
    """A wait's slice: `kept_alive` seconds inside `keep_alive` (its thread heartbeats meanwhile, so a
    watch may run longer than the heartbeat timeout: one watch request instead of several), else
    `wait_slice(preferred)`."""
    if _current.get() is not None:
        return kept_alive
    return wait_slice(preferred)


def _heartbeat_seconds() -> float:
    try:
        timeout = activity.info().heartbeat_timeout
    except RuntimeError:
        return 0.0  # called outside an activity (a script, a unit test)
    return timeout.total_seconds() if timeout else 0.0


class _KeepAlive:
    """Re-sends the latest heartbeat details every `interval` seconds until stopped."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.details: tuple[Any, ...] = ()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                activity.heartbeat(*self.details)
            except Exception as err:  # noqa: BLE001 - a missed beat must never end the thread
                # The worker's event loop did not take the beat within 10 s; the next one may.
                log.debug("background heartbeat failed: %s", err)


_current: contextvars.ContextVar[_KeepAlive | None] = contextvars.ContextVar("keep_alive", default=None)


def beat(*details: Any) -> None:
    """Heartbeat now with `details`; the keep-alive thread (if any) repeats them from then on."""
    keeper = _current.get()
    if keeper is not None:
        keeper.details = details
    activity.heartbeat(*details)


def keep_alive(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a sync activity (below `@activity.defn`): heartbeat in the background while it runs.

    Details sent through `beat` are repeated, so a retried attempt still finds the latest ones.
    Without a heartbeat timeout (or outside an activity) the function runs as is.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        seconds = _heartbeat_seconds()
        if not seconds:
            return fn(*args, **kwargs)
        keeper = _KeepAlive(seconds / 3)
        token = _current.set(keeper)
        # The copied context carries temporalio's activity context, which `activity.heartbeat` needs.
        thread = threading.Thread(target=contextvars.copy_context().run, args=(keeper.run,),
                                  name="heartbeat", daemon=True)
        thread.start()
        try:
            return fn(*args, **kwargs)
        finally:
            # Not joined: a beat in flight may wait up to 10 s for the event loop; the SDK ignores a
            # beat of a finished activity, and the thread ends after it.
            keeper.stopped.set()
            _current.reset(token)

    return wrapper
