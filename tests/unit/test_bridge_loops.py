"""Bridge loops survive any exception (the apiserver-restart chaos finding): backoff, run_forever, Lease rounds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from urllib3.exceptions import MaxRetryError

from crd_bridge.leader import LeaderElector, LeaseSettings
from crd_bridge.loops import Loop, backoff_seconds, run_forever


def test_backoff_doubles_from_the_first_wait_up_to_the_cap() -> None:
    assert backoff_seconds(0, 3.0) == 3.0
    assert [backoff_seconds(n, 0.0) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff_seconds(1, 3.0) == 3.0
    assert backoff_seconds(2, 3.0) == 6.0


def test_backoff_never_shorter_than_a_long_interval() -> None:
    assert backoff_seconds(10, 60.0) == 60.0


async def test_run_forever_outlives_exceptions_of_any_type() -> None:
    errors: list[BaseException] = [MaxRetryError(None, "/apis", "connection refused"), RuntimeError("boom")]
    calls: list[int] = []
    done = asyncio.Event()

    async def step() -> None:
        calls.append(len(calls))
        if errors:
            raise errors.pop(0)
        if len(calls) >= 4:
            done.set()

    task = asyncio.create_task(run_forever(Loop("test", step, 0.0, sleep_first=False, first_backoff=0.0)))
    await asyncio.wait_for(done.wait(), timeout=5)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(calls) >= 4


class _UnreachableLeases:
    """The CoordinationV1Api calls as they behave while the apiserver is down."""

    def read_namespaced_lease(self, *_args: Any) -> Any:
        raise MaxRetryError(None, "/apis/coordination.k8s.io", "connection refused")


def test_lease_round_with_apiserver_down_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    elector = LeaderElector(LeaseSettings(identity="a"))
    monkeypatch.setattr(elector, "_api", _UnreachableLeases)
    assert elector.try_acquire_or_renew() is False
