"""Long-running bridge loops that survive any error from the APIs they call. Does no I/O itself.

Every periodic task of the bridge (leader election, status polling, resync) runs one `step` per
round through `run_forever`: an exception of any type (urllib3's MaxRetryError while the apiserver
restarts, an ApiException 5xx, a Temporal RPCError, a bug) is logged and the round is retried after
an exponential backoff, instead of silently ending the asyncio task. A task that died that way used
to leave the bridge watching but never leading or writing status again (chaos finding).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("noderoll.bridge.loops")
MAX_BACKOFF_SECONDS = 30.0


def backoff_seconds(failures: int, interval: float, first: float = 1.0, cap: float = MAX_BACKOFF_SECONDS) -> float:
    """Wait before the next round after `failures` failed rounds in a row (0: the plain interval). Pure.

    Doubles from `max(interval, first)` up to `cap` (or the interval, when that is longer).
    """
    if failures <= 0:
        return interval
    return min(max(interval, first) * 2 ** (failures - 1), max(cap, interval))


@dataclass(frozen=True)
class Loop:
    """One named periodic task: `step` every `interval` seconds (sleeping first when `sleep_first`)."""

    name: str
    step: Callable[[], Awaitable[None]]
    interval: float
    sleep_first: bool = True
    first_backoff: float = 1.0


async def run_forever(loop: Loop) -> None:
    """Run `loop.step` until cancelled; an exception is logged and the next round backs off."""
    failures = 0
    if loop.sleep_first:
        await asyncio.sleep(loop.interval)
    while True:
        try:
            await loop.step()
            failures = 0
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the loop must outlive any API outage; logged and retried
            failures += 1
            log.exception("bridge loop %s failed (%d in a row); retrying in %.0fs",
                          loop.name, failures, backoff_seconds(failures, loop.interval, loop.first_backoff))
        await asyncio.sleep(backoff_seconds(failures, loop.interval, loop.first_backoff))
