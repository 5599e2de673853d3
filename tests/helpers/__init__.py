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


def _timeout_error(timeout: float, last: BaseException | None, result: object) -> EventuallyTimeout:
    detail = f"last error: {last!r}" if last is not None else f"last result: {result!r}"
    return EventuallyTimeout(f"condition still not met after {timeout:.1f}s ({detail})")


def assert_eventually(
    fn: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """Call `fn` until it neither raises one of `retry_on` nor returns False; return its result.

    Write `fn` as assertions (`assert pod.spec.node_name == "a"`) or as a predicate returning a
    bool; return the observed object to use it afterwards. Other exceptions propagate at once.
    An empty list is a result, not False: wait for "some" with `lambda: items() or False`.
    """
    deadline = time.monotonic() + timeout
    while True:
        last: BaseException | None = None
        result: object = None
        try:
            result = fn()
            if result is not False:
                return result  # type: ignore[return-value]
        except retry_on as err:
            last = err
        if time.monotonic() >= deadline:
            raise _timeout_error(timeout, last, result) from last
        time.sleep(interval)


async def assert_eventually_async(
    fn: Callable[[], Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """`assert_eventually` for a coroutine function (a Temporal query, describe, ...)."""
    deadline = time.monotonic() + timeout
    while True:
        last: BaseException | None = None
        result: object = None
        try:
            result = await fn()
            if result is not False:
                return result  # type: ignore[return-value]
        except retry_on as err:
            last = err
        if time.monotonic() >= deadline:
            raise _timeout_error(timeout, last, result) from last
        await asyncio.sleep(interval)


def unique_name(prefix: str = "t") -> str:
    """A short DNS-label-safe name, unique per call: `<prefix>-<8 hex>` (at most 50 characters).

    Every object a test creates gets one, so one shared stack serves the whole run.
    """
    clean = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:40] or "t"
    return f"{clean}-{uuid.uuid4().hex[:8]}"


def new_task_queue() -> str:
    """A task queue nobody else polls (tests never use literal task-queue names)."""
    return f"tq-{uuid.uuid4()}"
