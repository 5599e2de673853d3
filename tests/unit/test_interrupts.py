"""Interrupt merge (api/interrupts.py)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from api.enums import InterruptType
from api.interrupts import STRENGTH, InterruptRequest, merge_interrupts


def req(kind: InterruptType, *services: str) -> InterruptRequest:
    return InterruptRequest(type=kind, services=services)


def test_nothing_requested_gives_no_interrupt() -> None:
    assert merge_interrupts([]) is None
    assert merge_interrupts([None, None]) is None


def test_reboot_wins() -> None:
    merged = merge_interrupts(
        [req(InterruptType.SERVICE, "a"), req(InterruptType.REBOOT), req(InterruptType.NOOP)]
    )
    assert merged == req(InterruptType.REBOOT)


def test_restart_all_beats_service() -> None:
    assert merge_interrupts(
        [req(InterruptType.SERVICE, "a"), req(InterruptType.RESTART_ALL_SERVICES)]
    ) == req(InterruptType.RESTART_ALL_SERVICES)


def test_services_are_unioned_and_sorted() -> None:
    merged = merge_interrupts(
        [req(InterruptType.SERVICE, "cron"), req(InterruptType.SERVICE, "foobar", "containerd", "cron")]
    )
    assert merged == req(InterruptType.SERVICE, "containerd", "cron", "foobar")


def test_noop_is_an_interrupt_without_drain() -> None:
    merged = merge_interrupts([req(InterruptType.NOOP)])
    assert merged == req(InterruptType.NOOP) and not merged.disruptive
    assert req(InterruptType.SERVICE, "x").disruptive


def test_env_value_for_the_interrupt_pod() -> None:
    assert json.loads(req(InterruptType.SERVICE, "a", "b").to_env()) == {
        "type": "service",
        "services": ["a", "b"],
    }


requests = st.builds(
    InterruptRequest,
    type=st.sampled_from(list(InterruptType)),
    services=st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3).map(tuple),
)


@settings(max_examples=500)
@given(st.lists(st.one_of(st.none(), requests), max_size=6))
def test_merged_interrupt_is_the_strongest_requested(items: list[InterruptRequest | None]) -> None:
    merged = merge_interrupts(items)
    wanted = [i for i in items if i is not None]
    if not wanted:
        assert merged is None
        return
    assert merged is not None
    assert STRENGTH[merged.type] == max(STRENGTH[i.type] for i in wanted)
    assert merged.type in {i.type for i in wanted}
    if merged.type is InterruptType.SERVICE:
        assert list(merged.services) == sorted(
            {s for i in wanted if i.type is InterruptType.SERVICE for s in i.services}
        )
    else:
        assert merged.services == ()
