"""The runtime-required taint rule (planning/node/runtime_taint.py): cases by name, then properties."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.keys import NODE_IGNORE_LABEL, RUNTIME_REQUIRED_GATE_LABEL, RUNTIME_REQUIRED_TAINT_KEY
from api.node_state import config_hashes
from api.package import PackageSpec
from planning.node.runtime_taint import (
    RuntimePackage,
    RuntimeTaintInput,
    RuntimeTaintResult,
    TaintChange,
    decide_runtime_taint,
)
from planning.node.targets import NodeView

T0 = datetime(2024, 7, 1, 12, tzinfo=UTC)
GPU = {"pool": "gpu"}
TAINT = {"key": RUNTIME_REQUIRED_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
ADD, REMOVE = TaintChange.ADD, TaintChange.REMOVE


def package(name: str = "rr", version: str = "1.0.0", created: datetime | None = T0, *, runtime: bool = True,
            config: dict[str, str] | None = None, **extra: Any) -> RuntimePackage:
    spec = PackageSpec.model_validate({
        "version": version, "image": f"example.test/{name}:1", "runtimeRequired": runtime,
        "nodeSelector": {"matchLabels": GPU}, "config": config or {}, **extra})
    return RuntimePackage(name, spec, created)


def entry(of: RuntimePackage, version: str | None = None, state: str = "complete", action: str = "install",
          stage: str = "config", config: dict[str, str] | None = None) -> dict[str, Any]:
    """A record of `of` on a node; by default a finished install of its desired version and config."""
    return {"version": version or of.spec.version, "image": of.spec.image, "stage": stage, "state": state,
            "action": action, "config": config_hashes(of.spec.config if config is None else config)}


def record(**entries: dict[str, Any]) -> str:
    return json.dumps({"packages": entries})


def decide(*packages: RuntimePackage, labels: dict[str, str] | None = None, tainted: bool = False,
           state: str = "", created: datetime | None = T0 + timedelta(minutes=5)) -> RuntimeTaintResult:
    node = NodeView("n", GPU if labels is None else labels, [TAINT] if tainted else [], state)
    return decide_runtime_taint(RuntimeTaintInput(node, created, list(packages)))


RR = package()
RR2 = package("rr2")
OLD_NODE = T0 - timedelta(days=1)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        # Removal: only from a node a runtimeRequired Package targets, only when all are complete there.
        pytest.param(decide(tainted=True), None, id="tainted-at-provisioning-no-package-keeps-it"),
        pytest.param(decide(package("plain", runtime=False), tainted=True), None, id="only-a-plain-package-keeps-it"),
        pytest.param(decide(RR, labels={"pool": "cpu"}, tainted=True, state=record(rr=entry(RR))), None,
                     id="not-targeted-keeps-it"),
        pytest.param(decide(RR, labels={**GPU, NODE_IGNORE_LABEL: "true"}, tainted=True, state=record(rr=entry(RR))),
                     None, id="ignored-node-keeps-it"),
        pytest.param(decide(package(uninstall={"enabled": True, "apply": True}), tainted=True), None,
                     id="uninstalling-package-gates-nothing"),
        pytest.param(decide(RR, tainted=True, created=OLD_NODE), None, id="nothing-recorded-keeps-it"),
        pytest.param(decide(RR, tainted=True, state=record(rr=entry(RR, state="erroring", stage="apply"))), None,
                     id="erroring-keeps-it"),
        pytest.param(decide(RR, tainted=True, state=record(rr=entry(RR, stage="apply"))), None,
                     id="stage-complete-but-sequence-not-keeps-it"),
        pytest.param(decide(package(version="1.1.0"), tainted=True, state=record(rr=entry(RR))), None,
                     id="older-version-complete-keeps-it"),
        pytest.param(decide(RR, tainted=True, state=record(rr=entry(RR))), REMOVE, id="complete-removes"),
        pytest.param(decide(RR, RR2, tainted=True, state=record(rr=entry(RR))), None, id="one-of-two-keeps-it"),
        pytest.param(decide(RR, RR2, tainted=True, state=record(rr=entry(RR), rr2=entry(RR2))), REMOVE,
                     id="both-complete-removes"),
        pytest.param(decide(RR, package("plain", runtime=False), tainted=True, state=record(rr=entry(RR))), REMOVE,
                     id="plain-packages-do-not-hold-it"),
        pytest.param(decide(RR, tainted=True, state=record(rr=entry(RR)), created=OLD_NODE), REMOVE,
                     id="provisioning-taint-removed-when-complete"),
        # Addition: nodes joining while the Package exists, and opted-in nodes.
        pytest.param(decide(RR), ADD, id="joined-after-the-package"),
        pytest.param(decide(RR, created=T0), ADD, id="joined-in-the-same-second"),
        pytest.param(decide(RR, created=OLD_NODE), None, id="existed-before-the-package"),
        pytest.param(decide(package(created=None)), None, id="package-time-unknown"),
        pytest.param(decide(RR, created=None), None, id="node-time-unknown"),
        pytest.param(decide(RR, labels={"pool": "cpu"}), None, id="joined-but-not-targeted"),
        pytest.param(decide(RR, state=record(rr=entry(RR))), None, id="joined-and-complete"),
        pytest.param(decide(RR, state=record(rr=entry(RR, state="in_progress", stage="apply"))), ADD,
                     id="joined-first-window-started-before-the-bridge-saw-it"),
        pytest.param(decide(RR, state=record(rr=entry(RR, state="erroring", stage="apply"))), ADD,
                     id="joined-first-install-failing"),
        pytest.param(decide(RR, state=record(rr=entry(RR, state="in_progress", stage="apply", action="install")),
                            created=OLD_NODE), None, id="first-install-of-an-older-node"),
        pytest.param(decide(package(image="example.test/rr:2"), state=record(rr=entry(RR))), None,
                     id="rebuilt-image-before-its-window-does-not-retaint"),
        pytest.param(decide(package(version="1.1.0"),
                            state=record(rr=entry(RR, version="1.1.0", state="erroring", action="upgrade",
                                                  stage="upgrade"))),
                     None, id="failing-upgrade-does-not-retaint"),
        pytest.param(decide(package(version="0.9.0"),
                            state=record(rr=entry(RR, version="0.9.0", state="in_progress", action="downgrade",
                                                  stage="apply"))),
                     None, id="downgrade-does-not-retaint"),
        pytest.param(decide(package(version="1.1.0"), state=record(rr=entry(RR))), None,
                     id="version-bump-does-not-retaint"),
        pytest.param(decide(package(version="1.1.0"),
                            state=record(rr=entry(RR, version="1.1.0", state="in_progress", action="upgrade",
                                                  stage="upgrade"))),
                     None, id="upgrade-under-way-does-not-retaint"),
        pytest.param(decide(package(config={"a.conf": "2"}), state=record(rr=entry(RR, config={"a.conf": "1"}))),
                     None, id="config-change-does-not-retaint"),
        pytest.param(decide(RR, RR2, state=record(rr=entry(RR))), ADD, id="joined-second-package-not-run-yet"),
        pytest.param(decide(RR, package("rr2", created=T0 + timedelta(days=1)), state=record(rr=entry(RR))), None,
                     id="package-created-after-the-node"),
        pytest.param(decide(package(version="1.1.0"), labels={**GPU, RUNTIME_REQUIRED_GATE_LABEL: "true"},
                            state=record(rr=entry(RR)), created=OLD_NODE), ADD, id="opt-in-label-gates-updates"),
        pytest.param(decide(RR, labels={**GPU, RUNTIME_REQUIRED_GATE_LABEL: "true"}, state=record(rr=entry(RR))),
                     None, id="opt-in-label-complete"),
        pytest.param(decide(RR, labels={**GPU, RUNTIME_REQUIRED_GATE_LABEL: "yes"}, created=OLD_NODE), None,
                     id="opt-in-label-needs-true"),
        pytest.param(decide(labels={**GPU, RUNTIME_REQUIRED_GATE_LABEL: "true"}), None, id="opt-in-without-package"),
        # An unreadable record: neither way.
        pytest.param(decide(RR, state="{garbage"), None, id="unreadable-state-no-add"),
        pytest.param(decide(RR, state="{garbage", tainted=True), None, id="unreadable-state-no-remove"),
    ],
)
def test_rule(result: RuntimeTaintResult, expected: TaintChange | None) -> None:
    assert result.change is expected, result.reason


def test_result_names_gating_and_pending_packages_and_why() -> None:
    result = decide(RR, RR2, package("plain", runtime=False), state=record(rr=entry(RR)))
    assert (result.change, result.gating, result.pending) == (ADD, ("rr", "rr2"), ("rr2",))
    assert "rr2" in result.reason and "joined" in result.reason
    removed = decide(RR, tainted=True, state=record(rr=entry(RR)))
    assert removed.reason == "every runtimeRequired Package targeting it is complete: rr"


# --- properties -------------------------------------------------------------------------------------

RECORDS = ("absent", "complete", "complete-old-version", "complete-old-config", "in-progress", "erroring")


@dataclass(frozen=True)
class Case:
    """A generated node and packages, with the facts the test knows by construction."""

    packages: list[RuntimePackage]
    labels: dict[str, str]
    tainted: bool
    created: datetime
    records: dict[str, str]  # package name -> one of RECORDS
    garbage: bool

    def targets(self, p: RuntimePackage) -> bool:
        """By construction: runtimeRequired, no uninstall, the GPU selector on a GPU node not ignored."""
        return (p.spec.runtime_required and not p.spec.uninstall.apply and self.labels.get("pool") == "gpu"
                and self.labels.get(NODE_IGNORE_LABEL) != "true")

    @property
    def gating(self) -> list[RuntimePackage]:
        return [p for p in self.packages if self.targets(p)]

    def complete(self, p: RuntimePackage) -> bool:
        return not self.garbage and self.records[p.name] == "complete"

    def state(self) -> str:
        if self.garbage:
            return "not json"
        entries = {}
        for p in self.packages:
            kind = self.records[p.name]
            if kind == "complete":
                entries[p.name] = entry(p)
            elif kind == "complete-old-version":
                entries[p.name] = entry(p, version="0.9.0")
            elif kind == "complete-old-config":
                entries[p.name] = entry(p, config={"a.conf": "old"})
            elif kind == "in-progress":
                entries[p.name] = entry(p, state="in_progress", stage="apply")
            elif kind == "erroring":
                entries[p.name] = entry(p, state="erroring", stage="apply")
        return record(**entries)

    def input(self, **changes: Any) -> RuntimeTaintInput:
        case = replace(self, **changes)
        node = NodeView("n", case.labels, [TAINT] if case.tainted else [], case.state())
        return RuntimeTaintInput(node, case.created, list(case.packages))


@st.composite
def cases(draw: st.DrawFn) -> Case:
    # Weighted towards nodes that runtimeRequired Packages target, so every outcome is common.
    count = draw(st.integers(0, 3))
    packages = []
    for i in range(count):
        extra: dict[str, Any] = {}
        if draw(st.integers(0, 5)) == 0:
            extra["uninstall"] = {"enabled": True, "apply": draw(st.booleans())}
        packages.append(package(
            f"p{i}", draw(st.sampled_from(["1.0.0", "1.1.0"])), T0 + timedelta(seconds=draw(st.integers(-5, 5))),
            runtime=draw(st.integers(0, 4)) > 0, config=draw(st.sampled_from([{}, {"a.conf": "x"}])), **extra))
    labels = {"pool": draw(st.sampled_from(["gpu", "gpu", "gpu", "cpu"]))}
    if draw(st.booleans()):
        labels[RUNTIME_REQUIRED_GATE_LABEL] = draw(st.sampled_from(["true", "false"]))
    if draw(st.integers(0, 9)) == 0:
        labels[NODE_IGNORE_LABEL] = "true"
    kinds = st.sampled_from([*RECORDS, "complete", "complete", "absent"])
    return Case(
        packages=packages,
        labels=labels,
        tainted=draw(st.booleans()),
        created=T0 + timedelta(seconds=draw(st.integers(-5, 5))),
        records={p.name: draw(kinds) for p in packages},
        garbage=draw(st.integers(0, 19)) == 0,
    )


@settings(max_examples=400, deadline=None)
@given(cases())
def test_removes_only_where_targeted_and_everything_is_complete(case: Case) -> None:
    result = decide_runtime_taint(case.input())
    if result.change is REMOVE:
        assert case.tainted
        assert case.gating, "removed from a node no runtimeRequired Package targets"
        assert all(case.complete(p) for p in case.gating), "removed while a targeting package is incomplete"
    if not case.gating:
        assert result.change is None, "acted on a node no runtimeRequired Package targets"


@settings(max_examples=400, deadline=None)
@given(cases())
def test_adds_only_where_something_is_incomplete(case: Case) -> None:
    result = decide_runtime_taint(case.input())
    if result.change is ADD:
        assert not case.tainted
        assert any(not case.complete(p) for p in case.gating), "added to a node complete for every package"


@settings(max_examples=400, deadline=None)
@given(cases(), st.data())
def test_a_version_or_config_bump_never_taints_a_provisioned_node(case: Case, data: st.DataObject) -> None:
    # A provisioned node: every package recorded complete, the gate label off.
    labels = {k: v for k, v in case.labels.items() if k != RUNTIME_REQUIRED_GATE_LABEL}
    provisioned = replace(case, labels=labels, tainted=False, garbage=False,
                          records=dict.fromkeys(case.records, "complete"))
    assert decide_runtime_taint(provisioned.input()).change is None
    bumped, records = [], {}
    for p in provisioned.packages:
        how = data.draw(st.sampled_from(["same", "version", "config"]))
        if how == "same":
            bumped.append(p)
            records[p.name] = "complete"
            continue
        spec = p.spec.model_copy(update={"version": "2.0.0"} if how == "version" else {"config": {"a.conf": "new"}})
        bumped.append(replace(p, spec=spec))
        # Before its window (the record still shows the old spec) or under way (the new version in progress).
        records[p.name] = data.draw(st.sampled_from(["complete-old", "in-progress"]))
    after = replace(provisioned, packages=bumped)
    node_state = {}
    for old, new in zip(provisioned.packages, bumped, strict=True):
        if records[new.name] == "in-progress":
            action = "upgrade" if new.spec.version != old.spec.version else "config"
            node_state[new.name] = entry(new, state="in_progress", action=action, stage="upgrade")
        else:
            node_state[new.name] = entry(old)
    node = NodeView("n", after.labels, [], record(**node_state))
    assert decide_runtime_taint(RuntimeTaintInput(node, after.created, bumped)).change is not ADD


@settings(max_examples=400, deadline=None)
@given(cases())
def test_no_flapping(case: Case) -> None:
    untainted = decide_runtime_taint(case.input(tainted=False))
    tainted = decide_runtime_taint(case.input(tainted=True))
    if untainted.change is ADD:
        assert tainted.change is None, "an added taint would be removed at once"
    if tainted.change is REMOVE:
        assert untainted.change is None, "a removed taint would be added back at once"


@settings(max_examples=200, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
def test_same_answer_whatever_the_order_or_how_often_asked(case: Case, rnd: random.Random) -> None:
    # The rule reads only stored objects: a restarted bridge (another order, asked again) agrees.
    first = decide_runtime_taint(case.input())
    shuffled = list(case.packages)
    rnd.shuffle(shuffled)
    assert decide_runtime_taint(case.input(packages=shuffled)) == first
    assert decide_runtime_taint(case.input()) == first
