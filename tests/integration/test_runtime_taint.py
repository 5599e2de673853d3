"""The runtime-required taint on the real stack: `noderoll worker`, `noderoll bridge`, fleetsim nodes.

Issue #12, item 2. A watch records every change of the test's Nodes (taint present, the Package's
record), so "never" below means "at no change the apiserver sent", not "when we happened to look".
* Nodes tainted at provisioning while no Package exists keep the taint (the bridge used to strip
  it within a second); a runtimeRequired Package then removes it from a node only once complete
  there, and a node whose stage fails keeps it.
* Nodes joining while a runtimeRequired Package exists get the taint and lose it after their window;
  a version bump does not taint them again.
* The opt-in label `noderoll.io/runtime-required-gate=true` gates a node that existed before the
  Package, on the bump too; its unlabelled neighbour is never tainted.
* The taint write acts only on the Node version its decision was made on.
"Later bridge action": a sentinel node joins for a paused runtimeRequired Package (so the bridge
taints it); the pass that does so covers every Node the bridge saw before, since Node events
arrive in order and the sentinels' names sort after the test nodes'.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiClient

import kube
from api import keys
from fleetsim.faults import Fault
from kube.taints import SetTaintInput, set_runtime_required_taint
from localstack.state import StackInfo
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_processes, worker_settings
from tests.integration.bridge_support import (
    condition,
    create_package,
    delete_package,
    patch_package,
    read_package,
)

pytestmark = pytest.mark.integration
TAINT = {"key": keys.RUNTIME_REQUIRED_TAINT_KEY, "value": keys.RUNTIME_REQUIRED_TAINT_VALUE,
         "effect": keys.RUNTIME_REQUIRED_TAINT_EFFECT}
ROLLOUT_TIMEOUT = 180.0
# Node name prefixes: test nodes sort before the sentinels ("a" < "z").
TEST_PREFIX, SENTINEL_PREFIX = "rt-a", "rt-z"


@dataclass(frozen=True)
class Seen:
    """One Node change as the watch saw it."""

    node: str
    tainted: bool
    packages: dict[str, Any]


@dataclass
class NodeWatch:
    """Every change of the Nodes matching `selector`, in order (a watch thread: no polling)."""

    api: ApiClient
    selector: str
    seen: list[Seen] = field(default_factory=list)
    _watch: watch.Watch = field(default_factory=watch.Watch)
    _stopped: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> NodeWatch:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._watch.stop()

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        try:
            for event in self._watch.stream(core.list_node, label_selector=self.selector, timeout_seconds=900):
                node = event["object"]
                if event["type"] == "DELETED":
                    continue
                raw = (node.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION) or "{}"
                tainted = any(t.key == keys.RUNTIME_REQUIRED_TAINT_KEY for t in node.spec.taints or [])
                with self._lock:
                    self.seen.append(Seen(node.metadata.name, tainted, json.loads(raw).get("packages", {})))
        except Exception as err:  # noqa: BLE001 - `__exit__` closes the stream under the reader
            if not self._stopped:
                raise RuntimeError("node watch broke before the test ended") from err

    def of(self, node: str, since: int = 0) -> list[Seen]:
        """The node's changes, from change number `since` on."""
        with self._lock:
            return [s for s in self.seen[since:] if s.node == node]

    def mark(self) -> int:
        """The number of changes seen so far (for `of(since=...)`)."""
        with self._lock:
            return len(self.seen)


@dataclass
class Module:
    """This module's worker and bridge, and its sentinel Package."""

    run: NoderollProcesses
    stack: StackInfo
    api: ApiClient
    sentinel_label: dict[str, str]

    def bridge_has_seen_nodes(self) -> None:
        """A node joins for the paused sentinel Package; return once the bridge has tainted it."""
        with running_fleet(self.stack, nodes=1, labels=self.sentinel_label,
                           name_prefix=unique_name(SENTINEL_PREFIX)) as fleet:
            assert_eventually(lambda: tainted(self.api, fleet.node_names[0]), timeout=60)


@pytest.fixture(scope="module")
def module(local_stack: StackInfo, kube_api_client: ApiClient,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    """Worker (one stage attempt, so a failing stage errors at once), bridge, and the sentinel Package."""
    sentinel = unique_name("rt-sentinel")
    worker_env = worker_settings(stage_attempts=1, retry_backoff_seconds=1)
    with noderoll_processes(local_stack, tmp_path_factory.mktemp("runtime-taint"), worker_env) as run:
        labels = {"rt-sentinel": run.run_id}
        try:
            create_package(kube_api_client, run.package(sentinel, spec_for(labels, paused=True)))
            yield Module(run, local_stack, kube_api_client, labels)
        finally:
            delete_package(kube_api_client, sentinel)


def tainted(api: ApiClient, node: str) -> bool:
    """The node carries noderoll.io/runtime-required now."""
    return any(t.key == keys.RUNTIME_REQUIRED_TAINT_KEY for t in client.CoreV1Api(api).read_node(node).spec.taints or [])


def record(api: ApiClient, node: str, package: str) -> dict[str, Any]:
    """The node's recorded entry of `package` now ({} when none)."""
    raw = (client.CoreV1Api(api).read_node(node).metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION) or "{}"
    entry: dict[str, Any] = json.loads(raw).get("packages", {}).get(package, {})
    return entry


def done(entry: dict[str, Any], version: str) -> bool:
    """Complete at `version`: sysctl-tuning has no interrupt, so `config` is the last stage of its sequence."""
    return entry.get("version") == version and entry.get("stage") == "config" and entry.get("state") == "complete"


def spec_for(labels: dict[str, str], **fields: Any) -> dict[str, Any]:
    """A runtimeRequired sysctl-tuning Package spec selecting `labels`."""
    return package_spec(labels=labels, runtimeRequired=True, **fields)


def assert_untainted_only_when_done(watcher: NodeWatch, node: str, package: str, version: str,
                                    since: int = 0) -> None:
    """From the node's first tainted change on, every untainted change shows the Package complete."""
    changes = watcher.of(node, since)
    first = next((i for i, s in enumerate(changes) if s.tainted), None)
    assert first is not None, f"{node} was never tainted: {changes}"
    for change in changes[first:]:
        if not change.tainted:
            assert done(change.packages.get(package, {}), version), f"{node} untainted before complete: {change}"


async def test_provisioning_taint_kept_without_package_and_removed_only_where_complete(module: Module) -> None:
    api, run = module.api, module.run
    labels = {"rt-prov": unique_name("prov")}
    name = unique_name("rt-pkg")
    with NodeWatch(api, f"rt-prov={labels['rt-prov']}") as watcher, running_fleet(
        module.stack, nodes=2, labels=labels, register_taints=[TAINT], name_prefix=unique_name(TEST_PREFIX)
    ) as fleet:
        try:
            # (a) No Package: after a later taint the bridge made, the provisioning taints are intact,
            # and were at every change (the old bridge removed them: "runtime-required taint removed").
            module.bridge_has_seen_nodes()
            for node in fleet.node_names:
                assert tainted(api, node), node
                assert watcher.of(node) and all(s.tainted for s in watcher.of(node)), watcher.of(node)

            # (b) A runtimeRequired Package: each node loses the taint only once it is complete there;
            # a node whose apply fails keeps it.
            good, failing = fleet.node_names
            fleet.options.faults.add(Fault("fail-stage", nodes=failing, mode="apply", exit_code=7))
            create_package(api, run.package(name, spec_for(labels)))
            assert_eventually(lambda: done(record(api, good, name), "1.0.0") and not tainted(api, good),
                              timeout=ROLLOUT_TIMEOUT, interval=1)
            assert_eventually(lambda: record(api, failing, name).get("state") == "erroring",
                              timeout=ROLLOUT_TIMEOUT, interval=1)
            module.bridge_has_seen_nodes()
            assert tainted(api, failing)
            assert all(s.tainted for s in watcher.of(failing)), watcher.of(failing)
            assert_untainted_only_when_done(watcher, good, name, "1.0.0")
        finally:
            delete_package(api, name)


async def test_joining_nodes_gated_once_and_not_again_on_a_version_bump(module: Module) -> None:
    api, run = module.api, module.run
    labels = {"rt-join": unique_name("join")}
    name = unique_name("rt-pkg")
    try:
        create_package(api, run.package(name, spec_for(labels)))
        # The rollout has listed its (no) nodes: the nodes below reach it only through the bridge.
        assert_eventually(lambda: condition(read_package(api, name), "Ready")["status"] == "True", timeout=60)
        with NodeWatch(api, f"rt-join={labels['rt-join']}") as watcher, running_fleet(
            module.stack, nodes=2, labels=labels, name_prefix=unique_name(TEST_PREFIX)
        ) as fleet:
            # (c) Nodes joining while the Package exists are tainted, and untainted only once complete.
            def provisioned(version: str) -> bool:
                for node in fleet.node_names:
                    assert done(record(api, node, name), version) and not tainted(api, node), node
                return True

            assert_eventually(lambda: provisioned("1.0.0"), timeout=ROLLOUT_TIMEOUT, interval=1)
            for node in fleet.node_names:
                assert_untainted_only_when_done(watcher, node, name, "1.0.0")

            # (d) A version bump upgrades them without tainting them again (the old bridge did).
            mark = watcher.mark()
            patch_package(api, name, {"spec": {"version": "1.1.0"}})
            assert_eventually(lambda: provisioned("1.1.0"), timeout=ROLLOUT_TIMEOUT, interval=1)
            module.bridge_has_seen_nodes()
            for node in fleet.node_names:
                assert record(api, node, name)["action"] == "upgrade"
                changes = watcher.of(node, mark)
                assert changes and not any(s.tainted for s in changes), f"{node} tainted again: {changes}"
    finally:
        delete_package(api, name)


async def test_opt_in_label_gates_an_existing_node_and_its_updates(module: Module) -> None:
    api, run = module.api, module.run
    labels = {"rt-gate": unique_name("gate")}
    name = unique_name("rt-pkg")
    core = client.CoreV1Api(api)
    with NodeWatch(api, f"rt-gate={labels['rt-gate']}") as watcher, running_fleet(
        module.stack, nodes=2, labels=labels, name_prefix=unique_name(TEST_PREFIX)
    ) as fleet:
        gated, plain = fleet.node_names
        try:
            core.patch_node(gated, {"metadata": {"labels": {keys.RUNTIME_REQUIRED_GATE_LABEL: "true"}}})
            # Both nodes are older than the Package (a node created in its second counts as joining).
            newest = max(core.read_node(n).metadata.creation_timestamp for n in fleet.node_names)
            assert_eventually(lambda: datetime.now(UTC).replace(microsecond=0) > newest, timeout=5, interval=0.1)
            create_package(api, run.package(name, spec_for(labels)))
            created = read_package(api, name)["metadata"]["creationTimestamp"]
            assert datetime.fromisoformat(created) > newest, (created, newest)

            def provisioned(version: str) -> bool:
                for node in fleet.node_names:
                    assert done(record(api, node, name), version) and not tainted(api, node), node
                return True

            # (e) The labelled node is gated (untainted only once complete); its neighbour never is
            # (the old bridge tainted every targeted node that was not complete).
            assert_eventually(lambda: provisioned("1.0.0"), timeout=ROLLOUT_TIMEOUT, interval=1)
            assert_untainted_only_when_done(watcher, gated, name, "1.0.0")
            assert not any(s.tainted for s in watcher.of(plain)), watcher.of(plain)

            # ... and gated again on a bump, unlike its neighbour.
            mark = watcher.mark()
            patch_package(api, name, {"spec": {"version": "1.1.0"}})
            assert_eventually(lambda: provisioned("1.1.0"), timeout=ROLLOUT_TIMEOUT, interval=1)
            assert_untainted_only_when_done(watcher, gated, name, "1.1.0", since=mark)
            assert not any(s.tainted for s in watcher.of(plain)), watcher.of(plain)
        finally:
            delete_package(api, name)


def test_taint_write_acts_only_on_the_decided_version(local_stack: StackInfo, kube_api_client: ApiClient) -> None:
    kube.configure(local_stack.kubeconfig)
    core = client.CoreV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=1, name_prefix=unique_name(TEST_PREFIX)) as fleet:
        node = fleet.node_names[0]
        decided_on = core.read_node(node).metadata.resource_version
        core.patch_node(node, {"metadata": {"labels": {"other-writer": "was-here"}}})
        # Decided on a view that is no longer current: nothing written (the newer view is decided again).
        assert not set_runtime_required_taint(SetTaintInput(node, True, resource_version=decided_on))
        assert not tainted(kube_api_client, node)
        current = core.read_node(node).metadata.resource_version
        assert set_runtime_required_taint(SetTaintInput(node, True, resource_version=current))
        assert tainted(kube_api_client, node)
        assert not set_runtime_required_taint(SetTaintInput(node, True))  # already there: no write
        assert set_runtime_required_taint(SetTaintInput(node, False))
        assert not tainted(kube_api_client, node)
