"""Test helpers shared by every tier: polling assertions and unique names.

The only place in the test suite allowed to sleep: `assert_eventually` polls real servers
(the apiserver, the Temporal dev server) until a condition holds or a timeout passes.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
DEFAULT_INTERVAL = 0.2


class EventuallyTimeout(AssertionError):
    """The condition given to `assert_eventually` did not hold in time."""


class _Attempts:
    """One polling loop: its deadline, which errors it retries, and its last attempt (the error raised
    or the falsy result returned), for the timeout's message."""

    def __init__(self, timeout: float, retry_on: tuple[type[BaseException], ...]) -> None:
        self.timeout, self.retry_on = timeout, retry_on
        self.deadline = time.monotonic() + timeout
        self.error: BaseException | None = None
        self.result: object = None

    def __enter__(self) -> _Attempts:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> bool:
        """Swallow (and remember) an error of `retry_on`; let any other propagate."""
        if error is None or not isinstance(error, self.retry_on):
            return False
        self.error, self.result = error, None
        return True

    def done(self, result: object) -> bool:
        """True for a truthy result; a falsy one is remembered."""
        if result:
            return True
        self.error, self.result = None, result
        return False

    def raise_when_over(self) -> None:
        """EventuallyTimeout naming the last error or result, once the deadline has passed."""
        if time.monotonic() < self.deadline:
            return
        detail = f"last error: {self.error!r}" if self.error is not None else f"last result: {self.result!r}"
        raise EventuallyTimeout(f"condition still not met after {self.timeout:.1f}s ({detail})") from self.error


def assert_eventually(
    fn: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """Call `fn` until it returns a truthy result without raising one of `retry_on`; return that result.

    Only a truthy result is done: False, None, [], {}, 0 and "" keep it waiting, so `lambda: pods()`
    waits for some pods. Write `fn` as a predicate, as a probe returning the observed object, or as
    assertions that end in `return True` (or the object): a function that only asserts returns None
    and waits until the timeout. At the timeout, EventuallyTimeout names the last error or the last
    result. Other exceptions propagate at once.
    """
    attempts = _Attempts(timeout, retry_on)
    while True:
        with attempts:
            if attempts.done(result := fn()):
                return result
        attempts.raise_when_over()
        time.sleep(interval)


async def assert_eventually_async(
    fn: Callable[[], Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """`assert_eventually` for a coroutine function (a Temporal query, describe, ...): the same rule,
    only a truthy result is done."""
    attempts = _Attempts(timeout, retry_on)
    while True:
        with attempts:
            if attempts.done(result := await fn()):
                return result
        attempts.raise_when_over()
        await asyncio.sleep(interval)


def unique_name(prefix: str = "t") -> str:
    """A short DNS-label-safe name, unique per call: `<prefix>-<8 hex>` (at most 50 characters).

    Every object a test creates gets one, so one shared stack serves the whole run.
    """
    clean = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:40] or "t"
    return f"{clean}-{uuid.uuid4().hex[:8]}"


# Every task queue this test process made: the workflows on them are its own to end
# (tests/helpers/workflows_cleanup.py), never those of another run sharing the stack.
ISSUED_TASK_QUEUES: list[str] = []


def new_task_queue() -> str:
    """A task queue nobody else polls (tests never use literal task-queue names)."""
    queue = f"tq-{uuid.uuid4()}"
    ISSUED_TASK_QUEUES.append(queue)
    return queue
