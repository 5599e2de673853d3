"""fleetsim's simulated kubelet rides out an apiserver outage: a reboot's NotReady and Ready writes and
the come-back pod listing are retried until they land (chaos test (c) keeps the apiserver down 40 s;
a single try that met it failed the simulated reboot, and the node's window waited for good).

Pure: the apiserver is a fake that gives no answer a number of times (status 0, as a refused
connection does), the timers are recorded instead of run, sleeping is replaced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from fleetsim import kube, kubelet, reboot
from fleetsim.context import SimNode
from fleetsim.kube import KubeError
from fleetsim.nodes import set_ready


@dataclass
class AwayApiserver:
    """Answers nothing for the first `away` requests, then everything (`answer` for GETs)."""

    away: int
    answer: dict[str, Any] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)

    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
                content_type: str = kube.JSON) -> dict[str, Any]:
        self.requests.append((method, path, body))
        if len(self.requests) <= self.away:
            raise KubeError(0, method, path, "no answer: connection refused")
        return self.answer if method == "GET" else {}


@dataclass
class Timers:
    """`Scheduler.call_later`, recorded."""

    later: list[tuple[float, Callable[[], None]]] = field(default_factory=list)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.later.append((delay, fn))


class NoFaults:
    def take(self, *_what: str) -> None:
        return None


def context(api: AwayApiserver) -> Any:
    """The parts of a `SimContext` the reboot path uses."""
    options = SimpleNamespace(reboot_seconds=15.0, faults=NoFaults())
    return SimpleNamespace(kube=api, stopping=threading.Event(), options=options, scheduler=Timers(),
                           pods_version="", lock=threading.Lock(), started=set(), terminating=set(), runs={})


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.time, "sleep", lambda _seconds: None)


def ready_written(request: tuple[str, str, Any]) -> tuple[str, str]:
    status = request[2]["status"]
    return status["conditions"][0]["status"], status["nodeInfo"]["bootID"]


def test_a_node_status_write_is_retried_until_the_apiserver_answers() -> None:
    api = AwayApiserver(away=6)
    node = SimNode("n1", 1, "boot-1")
    set_ready(context(api), node, False, "rebooting")
    assert len(api.requests) == 7
    assert ready_written(api.requests[-1]) == ("False", "boot-1")


def test_a_stopping_simulator_gives_up_at_once() -> None:
    # Its stop waits for this thread: a retry against a stack already gone must not hold it 10 minutes.
    api = AwayApiserver(away=100)
    ctx = context(api)
    ctx.stopping.set()
    with pytest.raises(KubeError):
        set_ready(ctx, SimNode("n1", 1, "boot-1"), True, "ready")
    assert len(api.requests) == 1


def test_a_reboot_that_begins_and_ends_inside_an_outage_still_comes_back() -> None:
    api = AwayApiserver(away=3)
    ctx = context(api)
    node = SimNode("n1", 1, "boot-1")
    resumed: list[str] = []

    def resume(_ctx: Any, n: SimNode) -> dict[str, int]:
        resumed.append(n.name)
        return {"restarted": 0, "failed": 0, "other": 0}

    reboot.begin_reboot(ctx, node, resume)
    assert ready_written(api.requests[-1]) == ("False", "boot-1")
    assert [delay for delay, _ in ctx.scheduler.later] == [15.0]

    api.away = len(api.requests) + 4  # down again when the node comes back
    ctx.scheduler.later[0][1]()
    assert resumed == ["n1"]
    condition, boot_id = ready_written(api.requests[-1])
    assert (condition, node.ready, node.rebooting) == ("True", True, False)
    assert boot_id == node.boot_id != "boot-1"


def test_a_node_back_from_a_reboot_lists_its_pods_until_the_apiserver_answers() -> None:
    api = AwayApiserver(away=5, answer={"items": []})
    counts = kubelet.resume_node(context(api), SimNode("n1", 1, "boot-2"))
    assert counts == {"restarted": 0, "failed": 0, "other": 0}
    assert [(m, p) for m, p, _ in api.requests] == [("GET", "/api/v1/pods")] * 6
