"""The bridge's pure decisions: what one reconcile does for (observed Package, rollout, last record)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from crd_bridge.decisions import Action, PackageFacts, RolloutState, decide_package
from crd_bridge.handled import LastHandled, parse_last_handled

A = Action
FACTS = PackageFacts(name="p", uid="u1", generation=3, valid=True)
SEEN = FACTS.handled()


def facts(**changes: object) -> PackageFacts:
    return replace(FACTS, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("observed", "rollout", "last", "actions"),
    [
        pytest.param(FACTS, RolloutState.ABSENT, None, [A.START], id="new-package-starts"),
        pytest.param(FACTS, RolloutState.CLOSED, SEEN, [A.START], id="closed-rollout-restarts"),
        pytest.param(FACTS, RolloutState.RUNNING, SEEN, [], id="nothing-changed-nothing-sent"),
        pytest.param(facts(generation=4), RolloutState.RUNNING, SEEN, [A.SIGNAL_SPEC], id="generation-bump"),
        pytest.param(facts(policy="pol@2"), RolloutState.RUNNING, SEEN, [A.SIGNAL_SPEC], id="policy-changed"),
        pytest.param(facts(paused=True), RolloutState.RUNNING, SEEN, [A.SIGNAL_PAUSE], id="pause"),
        pytest.param(FACTS, RolloutState.RUNNING, replace(SEEN, paused=True), [A.SIGNAL_RESUME], id="resume"),
        pytest.param(facts(paused=True), RolloutState.RUNNING, replace(SEEN, paused=True), [], id="still-paused"),
        pytest.param(FACTS, RolloutState.RUNNING, None, [A.SIGNAL_SPEC], id="record-lost-resends-spec"),
        pytest.param(facts(paused=True), RolloutState.RUNNING, None, [A.SIGNAL_SPEC, A.SIGNAL_PAUSE],
                     id="record-lost-paused"),
        pytest.param(FACTS, RolloutState.RUNNING, replace(SEEN, uid="old", paused=True), [A.SIGNAL_SPEC],
                     id="recreated-package-no-blind-resume"),
        pytest.param(facts(valid=False), RolloutState.ABSENT, None, [A.WRITE_INVALID_STATUS], id="invalid"),
        pytest.param(facts(valid=False), RolloutState.RUNNING, SEEN, [A.WRITE_INVALID_STATUS],
                     id="invalid-leaves-running-rollout"),
        pytest.param(facts(uninstall_enabled=True), RolloutState.ABSENT, None, [A.ADD_FINALIZER, A.START],
                     id="finalizer-before-start"),
        pytest.param(facts(has_finalizer=True), RolloutState.RUNNING, SEEN, [A.REMOVE_FINALIZER],
                     id="uninstall-disabled-drops-finalizer"),
        pytest.param(facts(deleting=True, has_finalizer=True), RolloutState.RUNNING, SEEN, [A.SIGNAL_DELETED],
                     id="deleting-signals-rollout"),
        pytest.param(facts(deleting=True, has_finalizer=True), RolloutState.CLOSED, SEEN, [A.REMOVE_FINALIZER],
                     id="deleting-rollout-ended-finalizer-goes"),
        pytest.param(facts(deleting=True, has_finalizer=True), RolloutState.ABSENT, None, [A.REMOVE_FINALIZER],
                     id="deleting-never-started"),
        pytest.param(facts(deleting=True, valid=False), RolloutState.ABSENT, None, [], id="deleting-invalid"),
    ],
)
def test_decide_package(
    observed: PackageFacts, rollout: RolloutState, last: LastHandled | None, actions: list[Action]
) -> None:
    assert decide_package(observed, rollout, last).actions == actions


def test_record_is_written_only_when_it_changes() -> None:
    assert decide_package(FACTS, RolloutState.RUNNING, SEEN).record is None
    assert decide_package(FACTS, RolloutState.ABSENT, None).record == SEEN
    assert decide_package(facts(paused=True), RolloutState.RUNNING, SEEN).record == replace(SEEN, paused=True)
    assert decide_package(facts(valid=False), RolloutState.ABSENT, None).record is None


def test_replaying_a_decision_sends_nothing_twice() -> None:
    # What a restarted bridge sees after the first reconcile stored its record.
    first = decide_package(facts(generation=5, paused=True), RolloutState.RUNNING, SEEN)
    assert first.actions == [A.SIGNAL_SPEC, A.SIGNAL_PAUSE]
    again = decide_package(facts(generation=5, paused=True), RolloutState.RUNNING, first.record)
    assert again.actions == [] and again.record is None


@pytest.mark.parametrize(
    "value",
    [None, "", "not json", "[]", '{"uid": "u"}', '{"generation": 1}', '{"uid": "u", "generation": "x"}'],
)
def test_garbled_record_is_unknown(value: str | None) -> None:
    assert parse_last_handled(value) is None


def test_record_round_trips() -> None:
    record = LastHandled(uid="u", generation=7, policy="gpu@3", paused=True)
    assert parse_last_handled(record.dump()) == record
