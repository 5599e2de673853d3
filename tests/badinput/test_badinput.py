"""Bad and hostile input, beyond the API catalogue (tests/catalogue): for each, the behaviour written in
docs/reliability.md holds: a clear message on the Package or the node, nothing else harmed, nothing lost.

Four groups. Failing inputs (F*), inputs that must still complete (C*) and inputs that hold a node
(H*: a node no window may update, reported blocked until someone acts) are applied together at the
start of their group, each on its own simulated nodes, so their rollouts (and the 3 attempts with
backoff of a failing stage) run in parallel; each test then checks its own case. Inputs that act in
the middle of a rollout (M*) run one after another.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from api.keys import (
    CORDONED_BY_ANNOTATION,
    IN_USE_FINALIZER,
    NODE_IGNORE_LABEL,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
    PACKAGE_PLURAL,
    POLICY_PLURAL,
    RESET_ANNOTATION,
)
from cli.main import main as cli_main
from fleetsim.fleet import Fleet
from fleetsim.workloads import create_pdb
from tests.badinput.support import System, blocked_reason, erroring_reason
from tests.helpers import assert_eventually, unique_name
from tests.helpers.packages import SLEEP_IMAGE, WORKLOAD_IMAGE, broken_image

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
    Case("F01-image-does-not-resolve", {"image": broken_image("does-not-exist")}, "ErrImagePull"),
    Case("F02-config-json-not-json", {"image": broken_image("invalid-json")}, "exit code 65"),
    Case("F03-config-json-wrong-schema", {"image": broken_image("wrong-schema")}, "exit code 65"),
    Case("F04-step-file-missing", {"image": broken_image("missing-step")}, "exit code 127"),
    Case("F06-expected-config-file-missing", {"image": broken_image("expects-config")}, "exit code 67"),
    Case("F07-step-exits-non-zero", {"env": {"BENCH_STAGE_EXIT": "3"}}, "exit code 3"),
    Case("F08-check-fails", {"env": {"BENCH_CHECK_EXIT": "4"}}, "apply-check failed"),
    Case("F09-step-fails-after-drain", {"env": {"BENCH_STAGE_EXIT": "5"}, "interrupt": REBOOT}, "exit code 5"),
    # F10 (a config too big for a ConfigMap) is refused at the door now: A01, test_admission_badinput.py.
]

# C02-C04 (an unreadable state annotation) were read as "nothing recorded" and overwritten: now H01-H03.
COMPLETING = [
    Case("C01-step-prints-10-mb", {"env": {"BENCH_STAGE_OUTPUT_BYTES": str(10 * 2**20)}}),
    Case("C05-state-annotation-claims-complete"),
    Case("C06-status-label-garbage"),
    Case("C07-cordoned-by-garbage-on-an-uncordoned-node", {"interrupt": REBOOT}),
    Case("C08-two-packages-write-the-same-file"),
    Case("C09-selector-matches-no-node", {"nodeSelector": {"matchLabels": {TARGET_LABEL: "nothing-has-this"}}}),
    Case("C10-longest-package-name", {"name": f"l{uuid.uuid4().hex[:8]}-" + "a" * 33}),
    Case("C11-ignored-node-in-the-selector", nodes=2),
    # Was F05 (agent exit 126): NodeWright makes steps executable before running them, so does noderoll.
    Case("C12-step-file-without-the-executable-bit", {"image": broken_image("not-executable")}),
]

# Hand-edited annotations written before the rollout (C05-C07).
NODE_EDITS: dict[str, dict[str, Any]] = {
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
    if case.id == "C11-ignored-node-in-the-selector":
        _edit_node(system, fleet.node_names[1], {"labels": {NODE_IGNORE_LABEL: "true"}})
    name = spec.pop("name", None) or unique_name("bad")
    if case.id == "C05-state-annotation-claims-complete":
        claim = {"packages": {name: {"version": "1.0.0", "image": SLEEP_IMAGE,
                                     "stage": "config", "state": "complete", "attempts": 1, "config": {}}}}
        _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: json.dumps(claim)}})
    applied = Applied(case, system.package(fleet, name=name, **spec), fleet)
    if case.id == "C08-two-packages-write-the-same-file":
        applied.extra = system.package(fleet, image=broken_image("other-writer"))
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
        assert system.stage_pods(applied.package) == []
        return
    state, problem = system.node_state(node)
    assert problem is None, "noderoll left its state annotation unreadable"
    assert state.packages[applied.package].state == "complete"
    jobs = system.stage_pods(applied.package)
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
        _assert_never_concurrent(jobs + system.stage_pods(applied.extra))
    if case.id == "C10-longest-package-name":
        assert jobs and all(len(j.metadata.name) <= 63 for j in jobs)
    if case.id == "C12-step-file-without-the-executable-bit":
        runs = fleet.sandbox(node) / "var" / "lib" / "bench-sleep" / "apply.runs"
        assert len(runs.read_text().splitlines()) == 1
    if case.id == "C11-ignored-node-in-the-selector":
        ignored = fleet.node_names[1]
        assert system.node_status_label(ignored) is None
        assert [j for j in jobs if j.metadata.labels["noderoll.io/node"] == ignored] == []


def _finished_at(pod: client.V1Pod) -> Any:
    """When the pod's last container finished (None while one has not)."""
    statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
    ends = [s.state.terminated.finished_at if s.state and s.state.terminated else None for s in statuses]
    return None if not ends or None in ends else max(ends)


def _assert_never_concurrent(pods: list[client.V1Pod]) -> None:
    spans = sorted((p.status.start_time, _finished_at(p)) for p in pods)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end is not None and end <= start, "two packages ran stages on one node at the same time"


# --- inputs that hold a node -------------------------------------------------------------------

UNKNOWN_VOCABULARY = {"packages": {"anything": {"version": "9", "stage": "warp", "state": "exploded", "attempts": "x"}}}
HELD = [
    # Written on the first of two nodes before the rollout: that node is held, the other completes.
    Case("H01-state-annotation-not-json", nodes=2),
    Case("H02-state-annotation-a-json-list", nodes=2),
    Case("H03-state-annotation-unknown-stage-and-state", nodes=2),
    # Written on the node once the package completed there.
    Case("H04-state-annotation-garbled-on-a-complete-node"),
    # A taint the package does not tolerate on the first of two nodes.
    Case("H05-untolerated-taint", nodes=2),
]
GARBAGE = {
    "H01-state-annotation-not-json": "{{{ not json",
    "H02-state-annotation-a-json-list": "[1, 2, 3]",
    "H03-state-annotation-unknown-stage-and-state": json.dumps(UNKNOWN_VOCABULARY),
    "H04-state-annotation-garbled-on-a-complete-node": "garbage written by hand",
}
TAINT = {"key": "badinput.noderoll.io/dedicated", "value": "infer", "effect": "NoSchedule"}


def _apply_held(system: System, stack: ExitStack, case: Case) -> Applied:
    fleet = stack.enter_context(system.fleet(case.nodes))
    node = fleet.node_names[0]
    if case.id in GARBAGE and case.nodes == 2:
        _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: GARBAGE[case.id]}})
    if case.id == "H05-untolerated-taint":
        system.core.patch_node(node, {"spec": {"taints": [TAINT]}})
    return Applied(case, system.package(fleet), fleet)


@pytest.fixture(scope="module")
def held(system: System) -> Iterator[dict[str, Applied]]:
    with ExitStack() as stack:
        yield {case.id: _apply_held(system, stack, case) for case in HELD}


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def _blocked_status(system: System, applied: Applied, expect: str) -> dict[str, Any]:
    """Wait until the Package says the first node is blocked (`expect` in the reason), Ready False."""
    node = applied.node

    def says_blocked(status: dict[str, Any]) -> bool:
        assert expect in blocked_reason(status, node), status.get("blockedNodes")
        assert status.get("phase") == "Blocked", status.get("phase")
        ready = _ready(status)
        assert (ready.get("status"), ready.get("reason")) == ("False", "NodesBlocked"), ready
        assert node in ready.get("message", "") and expect in ready.get("message", ""), ready
        return True

    return system.wait_status(applied.package, says_blocked)


def _assert_held(system: System, applied: Applied, garbage: str) -> None:
    """The node is held: marked, its annotation kept, never touched."""
    node = applied.node

    def marked() -> bool:
        conditions = {c.type: c for c in system.node(node).status.conditions or []}
        malformed = conditions.get("noderoll.io/StateMalformed")
        assert malformed is not None and malformed.status == "True" and malformed.reason == "ParseError", malformed
        assert "unreadable" in malformed.message
        found = system.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
        assert [e for e in found if e.type == "Warning" and e.reason == "StateMalformed"], [e.reason for e in found]
        assert system.node_status_label(node) == "blocked"
        return True

    assert_eventually(marked, timeout=60, interval=0.5)
    assert (system.node(node).metadata.annotations or {})[NODE_STATE_ANNOTATION] == garbage, "garbage kept"
    assert system.cordoned(applied.fleet) == []


def _node_jobs(system: System, package: str, node: str) -> list[client.V1Job]:
    return [j for j in system.stage_pods(package) if j.metadata.labels["noderoll.io/node"] == node]


def _wait_ready(system: System, package: str, nodes: int) -> dict[str, Any]:
    return system.wait_status(package, lambda s: s.get("phase") == "Complete" and _ready(s).get("status") == "True"
                              and (s.get("nodes") or {}).get("complete") == nodes and not s.get("blockedNodes"))


def _cli_status(system: System, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    flags = ["--temporal-address", system.stack.info.temporal_address, "--kubeconfig", system.kubeconfig]
    capsys.readouterr()
    assert cli_main(["status", *args, *flags]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("case", HELD[:3], ids=lambda c: c.id)
def test_unreadable_state_holds_the_node_until_an_operator_acts(
    system: System, held: dict[str, Applied], case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    applied = held[case.id]
    node, other, package = applied.node, applied.fleet.node_names[1], applied.package
    status = _blocked_status(system, applied, "noderoll.io/state unreadable")
    assert (status.get("nodes") or {}).get("complete") == 1 and _entry(system, other, package).state == "complete"
    _assert_held(system, applied, GARBAGE[case.id])
    assert _node_jobs(system, package, node) == [], "nothing ran on the held node"
    if case.id == "H01-state-annotation-not-json":
        # `noderoll status` names it, in the table and in the package's detail.
        assert node in _cli_status(system, capsys) and "Blocked" in _cli_status(system, capsys)
        detail = _cli_status(system, capsys, package)
        assert "blocked nodes" in detail and node in detail and "unreadable" in detail
        # The documented release (docs/operations.md): remove the annotation; the node is fresh.
        subprocess.run(["kubectl", "--kubeconfig", system.kubeconfig, "annotate", "node", node,
                        f"{NODE_STATE_ANNOTATION}-"], check=True, capture_output=True, timeout=60)
        _wait_ready(system, package, 2)
        assert _entry(system, node, package).state == "complete" and _node_jobs(system, package, node)
        assert system.node_status_label(node) == "complete"
    elif case.id == "H02-state-annotation-a-json-list":
        # Or repair it: here into a record of the package complete, so no window is due at all.
        claim = {"packages": {package: {"version": "1.0.0", "image": SLEEP_IMAGE,
                                        "stage": "config", "state": "complete", "attempts": 1, "config": {}}}}
        _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: json.dumps(claim)}})
        _wait_ready(system, package, 2)
        assert _node_jobs(system, package, node) == []
        assert_eventually(lambda: system.node_status_label(node) == "complete", timeout=60, interval=0.5)
        assert [e for e in system.events(node) if e.startswith("StateRepaired:")]
    else:
        return
    conditions = {c.type: c.status for c in system.node(node).status.conditions or []}
    assert conditions.get("noderoll.io/StateMalformed") == "False"


def test_h04_state_garbled_on_a_complete_node_makes_the_package_not_ready(
    system: System, held: dict[str, Applied]
) -> None:
    applied = held["H04-state-annotation-garbled-on-a-complete-node"]
    node, package = applied.node, applied.package
    _wait_ready(system, package, 1)
    jobs = len(system.stage_pods(package))
    garbage = GARBAGE[applied.case.id]
    _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: garbage}})
    status = _blocked_status(system, applied, "noderoll.io/state unreadable")
    assert (status.get("nodes") or {}).get("blocked") == 1
    _assert_held(system, applied, garbage)
    assert len(system.stage_pods(package)) == jobs, "nothing ran again"


def test_h05_untolerated_taint_keeps_the_package_not_ready_until_removed(
    system: System, held: dict[str, Applied]
) -> None:
    applied = held["H05-untolerated-taint"]
    node, package = applied.node, applied.package
    _blocked_status(system, applied, "taints not tolerated: badinput.noderoll.io/dedicated=infer:NoSchedule")
    assert_eventually(lambda: system.node_status_label(node) == "blocked", timeout=60, interval=0.5)
    assert _node_jobs(system, package, node) == []
    kept = [{"key": t.key, "value": t.value, "effect": t.effect}
            for t in system.node(node).spec.taints or [] if t.key != TAINT["key"]]
    system.core.patch_node(node, {"spec": {"taints": kept or None}})
    _wait_ready(system, package, 2)
    assert _entry(system, node, package).state == "complete" and system.node_status_label(node) == "complete"


# --- inputs in the middle of a rollout ----------------------------------------------------------


def _first_job(system: System, package: str, node: str | None = None) -> None:
    def started() -> bool:
        jobs = system.stage_pods(package)
        assert [j for j in jobs if node is None or j.metadata.labels["noderoll.io/node"] == node]
        return True

    assert_eventually(started, timeout=120, interval=0.5)


def test_m01_node_deleted_mid_window(system: System) -> None:
    with system.fleet(2) as fleet:
        gone, kept = fleet.node_names
        package = system.package(fleet, stage_seconds=4, interrupt=REBOOT)
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
        package = system.package(fleet, stage_seconds=3, interrupt=REBOOT, deploymentPolicy=policy)
        _first_job(system, package)
        system.delete(PACKAGE_PLURAL, package)

        def gone() -> bool:
            with pytest.raises(client.exceptions.ApiException) as err:
                system.package_object(package)
            assert err.value.status == 404
            return True

        assert_eventually(gone, timeout=120, interval=0.5)
        assert_eventually(lambda: system.cordoned(fleet) == [], timeout=120, interval=0.5)
        started = {j.metadata.labels["noderoll.io/node"] for j in system.stage_pods(package)}
        assert len(started) < 3, "the deleted Package's rollout went on to new nodes"


def test_m03_policy_deleted_while_referenced(system: System) -> None:
    """Deletion protection (issue 16): the policy is kept while its Package names it; the rollout goes on."""
    with system.fleet(3) as fleet:
        policy = system.policy(budget_percent=34, initial_batch=1)
        package = system.package(fleet, stage_seconds=2, deploymentPolicy=policy)
        _first_job(system, package)
        system.delete(POLICY_PLURAL, policy)

        def kept_and_says_why() -> bool:
            obj = system.custom.get_cluster_custom_object("noderoll.io", "v1alpha1", POLICY_PLURAL, policy)
            assert IN_USE_FINALIZER in obj["metadata"]["finalizers"] and obj["metadata"]["deletionTimestamp"]
            in_use = next(c for c in obj["status"]["conditions"] if c["type"] == "InUse")
            assert in_use["reason"] == "DeletionBlocked" and package in in_use["message"], in_use
            return True

        assert_eventually(kept_and_says_why, timeout=120, interval=0.5)
        system.wait_complete(package, 3)
        assert system.cordoned(fleet) == []
        system.delete(PACKAGE_PLURAL, package)

        def policy_gone() -> bool:
            try:
                system.custom.get_cluster_custom_object("noderoll.io", "v1alpha1", POLICY_PLURAL, policy)
            except client.exceptions.ApiException as err:
                assert err.status == 404
                return True
            raise AssertionError(f"DeploymentPolicy {policy} still there")

        assert_eventually(policy_gone, timeout=120, interval=0.5)


def test_m09_reset_of_a_package_the_node_never_recorded(system: System) -> None:
    """`noderoll.io/reset` naming an unknown package: the record stays, nothing runs, the Event says so."""
    with system.fleet(1) as fleet:
        package = system.package(fleet)
        system.wait_complete(package, 1)
        node, jobs = fleet.node_names[0], len(system.stage_pods(package))
        before = system.node_state(node)[0].packages[package]
        system.core.patch_node(node, {"metadata": {"annotations": {RESET_ANNOTATION: "m09:ghost-package"}}})

        def applied() -> bool:
            assert RESET_ANNOTATION not in (system.node(node).metadata.annotations or {})
            assert any("not recorded: ghost-package" in e for e in system.events(node)), system.events(node)
            return True

        assert_eventually(applied, timeout=120, interval=0.5)
        assert system.node_state(node)[0].packages[package] == before
        system.wait_complete(package, 1)
        assert len(system.stage_pods(package)) == jobs


def test_m04_node_relabelled_out_of_the_selector(system: System) -> None:
    target = unique_name("t")
    with system.fleet(3, labels={TARGET_LABEL: target}) as fleet:
        policy = system.policy(budget_percent=34, initial_batch=1)
        package = system.package(fleet, stage_seconds=3, interrupt=REBOOT, deploymentPolicy=policy,
                                 nodeSelector={"matchLabels": {TARGET_LABEL: target}})
        _first_job(system, package)
        running = {j.metadata.labels["noderoll.io/node"] for j in system.stage_pods(package)}
        untouched = next(n for n in fleet.node_names if n not in running)
        for node in [*running, untouched]:
            system.core.patch_node(node, {"metadata": {"labels": {TARGET_LABEL: None}}})
        # The window in flight finishes (its node is uncordoned); the untouched node never starts.
        assert_eventually(lambda: system.cordoned(fleet) == [] and all(
            (_entry(system, n, package) or {}) and _entry(system, n, package).state == "complete" for n in running),
            timeout=120, interval=0.5)
        status = system.wait_status(package, lambda s: s.get("phase") == "Complete")
        assert untouched not in {j.metadata.labels["noderoll.io/node"] for j in system.stage_pods(package)}
        assert (status.get("nodes") or {}).get("total", 0) <= 2


def test_m05_stage_pod_deleted_by_a_human(system: System) -> None:
    with system.fleet(1) as fleet:
        package = system.package(fleet, stage_seconds=8)
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
        applies = [j for j in system.stage_pods(package) if j.metadata.labels["noderoll.io/mode"] == "apply"]
        assert len(applies) == 2, "the interrupted stage ran again as attempt 2"


def test_m06_state_annotation_garbled_mid_window(system: System) -> None:
    with system.fleet(1) as fleet:
        node = fleet.node_names[0]
        package = system.package(fleet, stage_seconds=3)
        _first_job(system, package)
        _edit_node(system, node, {"annotations": {NODE_STATE_ANNOTATION: "garbage written by hand"}})
        system.wait_complete(package, 1)
        state, problem = system.node_state(node)
        assert problem is None and state.packages[package].state == "complete"


def _cli_json(system: System, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    flags = ["--temporal-address", system.procs.stack.temporal_address, "--kubeconfig", system.kubeconfig]
    capsys.readouterr()
    code = cli_main([*args, "-o", "json", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_m07_drain_blocked_by_a_pdb_is_visible_while_it_waits(system: System, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 12 item 8: a PDB allowing 0 disruptions holds the drain; every surface names it within a
    minute, and the window goes on as soon as the PDB allows the eviction."""
    namespace = unique_name("m07")
    system.core.create_namespace({"metadata": {"name": namespace}})
    with system.fleet(1) as fleet:
        node = fleet.node_names[0]
        app = {"app": "web"}
        client.AppsV1Api(system.api).create_namespaced_deployment(namespace, {
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": app}, "template": {"metadata": {"labels": app}, "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "web", "image": WORKLOAD_IMAGE}]}}}})
        # minAvailable = replicas: no voluntary disruption is ever allowed.
        version = create_pdb(fleet.ctx.kube, namespace, "web", {"minAvailable": 1, "selector": {"matchLabels": app}})
        pdbs = f"/apis/{version}/namespaces/{namespace}/poddisruptionbudgets"
        assert_eventually(lambda: (fleet.ctx.kube.request("GET", f"{pdbs}/web").get("status") or {}).get("currentHealthy") == 1,
                          timeout=60)
        package = system.package(fleet, interrupt=REBOOT)
        budget = f"{namespace}/web (disruptionsAllowed=0"

        def event() -> bool:
            events = system.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
            blocked = [e for e in events if e.reason == "DrainBlocked"]
            assert len(blocked) == 1 and blocked[0].type == "Warning" and budget in blocked[0].message, blocked
            return True

        def nodes_cli() -> bool:
            [shown] = _cli_json(system, capsys, "nodes", "--selector", f"kubernetes.io/hostname={node}")
            entry = shown["shown"][package]
            assert (entry["stage"], entry["state"]) == ("drain", "blocked") and budget in entry["message"], shown
            return True

        def status_cli() -> bool:
            data = _cli_json(system, capsys, "status", package)
            assert [b["node"] for b in data["drain_blocked"]] == [node] and budget in data["drain_blocked"][0]["message"]
            return True

        def package_status() -> bool:
            status = system.status(package)
            [blocked] = status.get("drainBlockedNodes") or [None]
            assert blocked and blocked["node"] == node and blocked["reason"] == "EvictionRefused", status
            assert budget in blocked["message"]
            progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
            assert f"drain blocked on 1 node(s): {node}" in progressing["message"]
            return True

        # Blocked after 15 s of refusals; the bridge writes the status every 3 s: well within a minute.
        for check in (event, nodes_cli, status_cli, package_status):
            assert_eventually(check, timeout=75, interval=1)
        # The window waits, and goes on once the PDB allows the eviction.
        assert system.node_status_label(node) == "in-progress"
        fleet.ctx.kube.request("DELETE", f"{pdbs}/web")
        status = system.wait_complete(package, 1)
        assert status.get("drainBlockedNodes") in (None, [])
        draining = next(c for c in system.node(node).status.conditions if c.type == "noderoll.io/Draining")
        assert (draining.status, draining.reason) == ("False", "Drained")
        assert system.cordoned(fleet) == []
    system.core.delete_namespace(namespace)
