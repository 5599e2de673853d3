"""Bad and hostile input, beyond the API catalogue (tests/catalogue): for each, the behaviour written in
docs/reliability.md holds: a clear message on the Package or the node, nothing else harmed, nothing lost.

Three groups. Failing inputs (F*) and inputs that must still complete (C*) are applied together at
the start of their group, each on its own simulated nodes, so their rollouts (and the 3 attempts
with backoff of a failing stage) run in parallel; each test then checks its own case. Inputs that
act in the middle of a rollout (M*) run one after another.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from api.keys import (
    CORDONED_BY_ANNOTATION,
    NODE_IGNORE_LABEL,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
    PACKAGE_PLURAL,
    POLICY_PLURAL,
)
from fleetsim.fleet import Fleet
from tests.badinput.support import System, blocked_reason, erroring_reason
from tests.helpers import assert_eventually, unique_name

FAIL_TIMEOUT = 300.0  # 3 attempts (1 s and 2 s backoff: support.FAST_RETRIES), on a busy machine
REBOOT = {"type": "reboot"}
TARGET_LABEL = "badinput.noderoll.io/target"
# The first test of a group waits for every rollout of its group (3 attempts of a failing stage).
pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Case:
    """One bad input applied as a Package on its own node(s)."""

    id: str
    spec: dict[str, Any] = field(default_factory=dict)
    expect: str = ""  # substring of the node's lastError / the Package's erroring reason
    nodes: int = 1


FAILING = [
    Case("F01-image-does-not-resolve", {"image": "bad.local/does-not-exist:1.0.0"}, "ErrImagePull"),
    Case("F02-config-json-not-json", {"image": "bad.local/invalid-json:1.0.0"}, "exit code 65"),
    Case("F03-config-json-wrong-schema", {"image": "bad.local/wrong-schema:1.0.0"}, "exit code 65"),
    Case("F04-step-file-missing", {"image": "bad.local/missing-step:1.0.0"}, "exit code 127"),
    Case("F06-expected-config-file-missing", {"image": "bad.local/expects-config:1.0.0"}, "exit code 67"),
    Case("F07-step-exits-non-zero", {"env": {"BENCH_STAGE_EXIT": "3"}}, "exit code 3"),
    Case("F08-check-fails", {"env": {"BENCH_CHECK_EXIT": "4"}}, "apply-check failed"),
    Case("F09-step-fails-after-drain", {"env": {"BENCH_STAGE_EXIT": "5"}, "interrupt": REBOOT}, "exit code 5"),
    Case("F10-config-too-big-for-a-configmap", {"config": {"big.conf": "x" * 1_100_000}}, "ConfigMap"),
]

COMPLETING = [
    Case("C01-step-prints-10-mb", {"env": {"BENCH_STAGE_OUTPUT_BYTES": str(10 * 2**20)}}),
    Case("C02-state-annotation-not-json"),
    Case("C03-state-annotation-a-json-list"),
    Case("C04-state-annotation-unknown-stage-and-state"),
    Case("C05-state-annotation-claims-complete"),
    Case("C06-status-label-garbage"),
    Case("C07-cordoned-by-garbage-on-an-uncordoned-node", {"interrupt": REBOOT}),
    Case("C08-two-packages-write-the-same-file"),
    Case("C09-selector-matches-no-node", {"nodeSelector": {"matchLabels": {TARGET_LABEL: "nothing-has-this"}}}),
    Case("C10-longest-package-name", {"name": f"l{uuid.uuid4().hex[:8]}-" + "a" * 33}),
    Case("C11-ignored-node-in-the-selector", nodes=2),
    # Was F05 (agent exit 126): NodeWright makes steps executable before running them, so does noderoll.
    Case("C12-step-file-without-the-executable-bit", {"image": "bad.local/not-executable:1.0.0"}),
]

# Hand-edited annotations written before the rollout (C02-C07).
NODE_EDITS: dict[str, dict[str, Any]] = {
    "C02-state-annotation-not-json": {"annotations": {NODE_STATE_ANNOTATION: "{{{ not json"}},
    "C03-state-annotation-a-json-list": {"annotations": {NODE_STATE_ANNOTATION: "[1, 2, 3]"}},
    "C06-status-label-garbage": {"labels": {NODE_STATUS_LABEL: "exploded"}},
    "C07-cordoned-by-garbage-on-an-uncordoned-node": {"annotations": {CORDONED_BY_ANNOTATION: "🙃 someone"}},
}


@dataclass
class Applied:
    """A case's Package, its fleet, and (C05/C08) extra names."""

    case: Case
    package: str
    fleet: Fleet
    extra: str = ""

    @property
    def node(self) -> str:
        return self.fleet.node_names[0]


def _edit_node(system: System, node: str, edit: dict[str, Any]) -> None:
    system.core.patch_node(node, {"metadata": edit})


def _apply_failing(system: System, stack: ExitStack, case: Case) -> Applied:
    fleet = stack.enter_context(system.fleet(case.nodes))
    return Applied(case, system.package(fleet, **case.spec), fleet)


def _apply_completing(system: System, stack: ExitStack, case: Case) -> Applied:
    spec = dict(case.spec)
    fleet = stack.enter_context(system.fleet(case.nodes))
    node = fleet.node_names[0]
    if case.id in NODE_EDITS:
        _edit_node(system, node, NODE_EDITS[case.id])
    if case.id == "C04-state-annotation-unknown-stage-and-state":
        state = {"packages": {"anything": {"version": "9", "stage": "warp", "state": "exploded", "attempts": "x"}}}
        _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: json.dumps(state)}})
    if case.id == "C11-ignored-node-in-the-selector":
        _edit_node(system, fleet.node_names[1], {"labels": {NODE_IGNORE_LABEL: "true"}})
    name = spec.pop("name", None) or unique_name("bad")
    if case.id == "C05-state-annotation-claims-complete":
        claim = {"packages": {name: {"version": "1.0.0", "image": "bench.local/bench-sleep:1.0.0",
                                     "stage": "config", "state": "complete", "attempts": 1, "config": {}}}}
        _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: json.dumps(claim)}})
    applied = Applied(case, system.package(fleet, name=name, **spec), fleet)
    if case.id == "C08-two-packages-write-the-same-file":
        applied.extra = system.package(fleet, image="bad.local/other-writer:1.0.0")
    return applied


@pytest.fixture(scope="module")
def failing(system: System) -> Iterator[dict[str, Applied]]:
    with ExitStack() as stack:
        yield {case.id: _apply_failing(system, stack, case) for case in FAILING}


@pytest.fixture(scope="module")
def completing(system: System) -> Iterator[dict[str, Applied]]:
    with ExitStack() as stack:
        yield {case.id: _apply_completing(system, stack, case) for case in COMPLETING}


def _entry(system: System, node: str, package: str) -> Any:
    state, _problem = system.node_state(node)
    return state.packages.get(package)


# --- failing inputs -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", FAILING, ids=lambda c: c.id)
def test_failing_input_is_reported_on_node_and_package(system: System, failing: dict[str, Applied], case: Case) -> None:
    applied = failing[case.id]
    node, package = applied.node, applied.package

    def node_erroring() -> Any:
        entry = _entry(system, node, package)
        assert entry is not None and entry.state == "erroring", entry
        assert case.expect in (entry.last_error or ""), entry.last_error
        return entry

    entry = assert_eventually(node_erroring, timeout=FAIL_TIMEOUT, interval=1.0)
    # The node says it, in the contract keys: label, condition, bounded message.
    assert system.node_status_label(node) == "erroring"
    conditions = {c.type: c.status for c in system.node(node).status.conditions or []}
    assert conditions.get("noderoll.io/Erroring") == "True"
    assert len(entry.last_error) <= 2000
    # The Package says it too.
    status = system.wait_status(package, lambda s: node in {e.get("node") for e in s.get("erroringNodes") or []})
    assert erroring_reason(status, node)
    # A failure before any drain leaves the node schedulable; one after the drain keeps it cordoned
    # (the host may be half-changed) and says so with a LeftCordoned Event.
    if case.spec.get("interrupt"):
        assert system.cordoned(applied.fleet) == [node]
        assert_eventually(lambda: any(e.startswith("LeftCordoned") for e in system.events(node)), timeout=30)
    else:
        assert system.cordoned(applied.fleet) == []


# --- inputs that must still complete ------------------------------------------------------------


@pytest.mark.parametrize("case", COMPLETING, ids=lambda c: c.id)
def test_hostile_input_still_completes(system: System, completing: dict[str, Applied], case: Case) -> None:
    applied = completing[case.id]
    fleet, node = applied.fleet, applied.node
    expected_nodes = {"C09-selector-matches-no-node": 0, "C11-ignored-node-in-the-selector": 1}.get(case.id, case.nodes)
    status = system.wait_complete(applied.package, expected_nodes)
    assert system.cordoned(fleet) == []
    if case.id == "C09-selector-matches-no-node":
        assert (status.get("nodes") or {}).get("total", 0) == 0
        assert system.jobs(applied.package) == []
        return
    state, problem = system.node_state(node)
    assert problem is None, "noderoll left its state annotation unreadable"
    assert state.packages[applied.package].state == "complete"
    jobs = system.jobs(applied.package)
    if case.id == "C05-state-annotation-claims-complete":
        # The recorded state is trusted: nothing runs on (or is written to) a node that says it is done.
        assert jobs == []
        return
    assert system.node_status_label(node) == "complete"
    if case.id == "C01-step-prints-10-mb":
        raw = system.node(node).metadata.annotations[NODE_STATE_ANNOTATION]
        assert len(raw) < 16_384, "a chatty step must not bloat the node annotation"
    if case.id == "C07-cordoned-by-garbage-on-an-uncordoned-node":
        assert CORDONED_BY_ANNOTATION not in (system.node(node).metadata.annotations or {})
    if case.id == "C08-two-packages-write-the-same-file":
        system.wait_complete(applied.extra, 1)
        runs = fleet.sandbox(node) / "var" / "lib" / "bench-sleep" / "apply.runs"
        assert len(runs.read_text().splitlines()) == 2
        _assert_never_concurrent(jobs + system.jobs(applied.extra))
    if case.id == "C10-longest-package-name":
        assert jobs and all(len(j.metadata.name) <= 63 for j in jobs)
    if case.id == "C12-step-file-without-the-executable-bit":
        runs = fleet.sandbox(node) / "var" / "lib" / "bench-sleep" / "apply.runs"
        assert len(runs.read_text().splitlines()) == 1
    if case.id == "C11-ignored-node-in-the-selector":
        ignored = fleet.node_names[1]
        assert system.node_status_label(ignored) is None
        assert [j for j in jobs if j.metadata.labels["noderoll.io/node"] == ignored] == []


def _assert_never_concurrent(jobs: list[client.V1Job]) -> None:
    spans = sorted((j.status.start_time, j.status.completion_time) for j in jobs)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end is not None and end <= start, "two packages ran stages on one node at the same time"


# --- inputs in the middle of a rollout ----------------------------------------------------------


def _first_job(system: System, package: str, node: str | None = None) -> None:
    def started() -> None:
        jobs = system.jobs(package)
        assert [j for j in jobs if node is None or j.metadata.labels["noderoll.io/node"] == node]

    assert_eventually(started, timeout=120, interval=0.5)


def test_m01_node_deleted_mid_window(system: System) -> None:
    with system.fleet(2) as fleet:
        gone, kept = fleet.node_names
        package = system.package(fleet, env={"BENCH_STAGE_SECONDS": "4"}, interrupt=REBOOT)
        _first_job(system, package, gone)
        system.core.delete_node(gone)
        status = system.wait_status(package, lambda s: (s.get("nodes") or {}).get("complete") == 1
                                    and (blocked_reason(s, gone) or erroring_reason(s, gone)
                                         or (s.get("nodes") or {}).get("total") == 1))
        assert system.cordoned(fleet) == []
        assert "does not exist" in (blocked_reason(status, gone) + erroring_reason(status, gone)) or \
            (status.get("nodes") or {}).get("total") == 1
        assert _entry(system, kept, package).state == "complete"


def test_m02_package_deleted_mid_rollout(system: System) -> None:
    with system.fleet(3) as fleet:
        policy = system.policy(budget_percent=34, initial_batch=1)
        package = system.package(fleet, env={"BENCH_STAGE_SECONDS": "3"}, interrupt=REBOOT, deploymentPolicy=policy)
        _first_job(system, package)
        system.delete(PACKAGE_PLURAL, package)

        def gone() -> None:
            with pytest.raises(client.exceptions.ApiException) as err:
                system.package_object(package)
            assert err.value.status == 404

        assert_eventually(gone, timeout=120, interval=0.5)
        assert_eventually(lambda: system.cordoned(fleet) == [], timeout=120, interval=0.5)
        started = {j.metadata.labels["noderoll.io/node"] for j in system.jobs(package)}
        assert len(started) < 3, "the deleted Package's rollout went on to new nodes"


def test_m03_policy_deleted_while_referenced(system: System) -> None:
    with system.fleet(3) as fleet:
        policy = system.policy(budget_percent=34, initial_batch=1)
        package = system.package(fleet, env={"BENCH_STAGE_SECONDS": "2"}, deploymentPolicy=policy)
        _first_job(system, package)
        system.delete(POLICY_PLURAL, policy)
        # The Package says which policy is missing ...
        system.wait_status(package, lambda s: policy in json.dumps(s.get("conditions", [])) + s.get("message", ""))
        # ... and nothing is lost: recreate it and the rollout completes.
        system.custom.create_cluster_custom_object("noderoll.io", "v1alpha1", POLICY_PLURAL, {
            "apiVersion": "noderoll.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": policy},
            "spec": {"default": {"budget": {"percent": 34}, "strategy": {"type": "fixed", "initialBatch": 1}}}})
        system.wait_complete(package, 3)
        assert system.cordoned(fleet) == []


def test_m04_node_relabelled_out_of_the_selector(system: System) -> None:
    target = unique_name("t")
    with system.fleet(3, labels={TARGET_LABEL: target}) as fleet:
        policy = system.policy(budget_percent=34, initial_batch=1)
        package = system.package(fleet, env={"BENCH_STAGE_SECONDS": "3"}, interrupt=REBOOT, deploymentPolicy=policy,
                                 nodeSelector={"matchLabels": {TARGET_LABEL: target}})
        _first_job(system, package)
        running = {j.metadata.labels["noderoll.io/node"] for j in system.jobs(package)}
        untouched = next(n for n in fleet.node_names if n not in running)
        for node in [*running, untouched]:
            system.core.patch_node(node, {"metadata": {"labels": {TARGET_LABEL: None}}})
        # The window in flight finishes (its node is uncordoned); the untouched node never starts.
        assert_eventually(lambda: system.cordoned(fleet) == [] and all(
            (_entry(system, n, package) or {}) and _entry(system, n, package).state == "complete" for n in running),
            timeout=120, interval=0.5)
        status = system.wait_status(package, lambda s: s.get("phase") == "Complete")
        assert untouched not in {j.metadata.labels["noderoll.io/node"] for j in system.jobs(package)}
        assert (status.get("nodes") or {}).get("total", 0) <= 2


def test_m05_stage_pod_deleted_by_a_human(system: System) -> None:
    with system.fleet(1) as fleet:
        package = system.package(fleet, env={"BENCH_STAGE_SECONDS": "8"})
        node = fleet.node_names[0]

        def running_pod() -> str:
            pods = system.core.list_namespaced_pod("noderoll-system", label_selector=f"noderoll.io/package={package}")
            names = [p.metadata.name for p in pods.items if p.status.phase == "Running"]
            assert names
            return names[0]

        system.core.delete_namespaced_pod(assert_eventually(running_pod, timeout=60), "noderoll-system")
        system.wait_complete(package, 1, timeout=FAIL_TIMEOUT)
        entry = _entry(system, node, package)
        assert entry.state == "complete"
        applies = [j for j in system.jobs(package) if j.metadata.labels["noderoll.io/mode"] == "apply"]
        assert len(applies) == 2, "the interrupted stage ran again as attempt 2"


def test_m06_state_annotation_garbled_mid_window(system: System) -> None:
    with system.fleet(1) as fleet:
        node = fleet.node_names[0]
        package = system.package(fleet, env={"BENCH_STAGE_SECONDS": "3"})
        _first_job(system, package)
        _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: "garbage written by hand"}})
        system.wait_complete(package, 1)
        state, problem = system.node_state(node)
        assert problem is None and state.packages[package].state == "complete"
