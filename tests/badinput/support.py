"""The bad-input suite's system under test: a private stack with `noderoll worker` and `noderoll bridge`
running as processes, an image store of broken packages, and reads of what a user sees (Package
status, node state, stage pods). No sleeps: waits go through `tests.helpers.assert_eventually`.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from api.keys import (
    API_VERSION,
    GROUP,
    NODE_STATE_ANNOTATION,
    NODE_STATUS_LABEL,
    PACKAGE_PLURAL,
    POLICY_KIND,
    POLICY_PLURAL,
    VERSION,
)
from api.node_state import NodeState, parse_node_state
from fleetsim.context import PREFIX_LABEL
from fleetsim.fleet import Fleet
from protocol.node_settings import RETRY_BACKOFF_ENV, STAGE_ATTEMPTS_ENV
from tests.helpers import assert_eventually, unique_name
from tests.helpers.chaos import ChaosStack
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import BENCH_PACKAGES, SLEEP_IMAGE, package_object, package_spec
from tests.helpers.processes import NoderollProcesses
from tests.helpers.stagepods import StagePodRecorder

SLEEP_PACKAGE = BENCH_PACKAGES / "bench-sleep"
# The default 3 attempts per stage, but 1 s and 2 s apart instead of 30 s and 60 s: what each case
# shows (the attempts, the message, what is left untouched) does not depend on the wait.
FAST_RETRIES = {STAGE_ATTEMPTS_ENV: "3", RETRY_BACKOFF_ENV: "1"}
ROLLOUT_TIMEOUT = 180.0


def build_image_store(root: Path) -> Path:
    """Broken variants of bench-sleep, one folder each (image `broken_image(<folder>)`)."""
    def variant(name: str) -> Path:
        target = root / name
        shutil.copytree(SLEEP_PACKAGE, target)
        return target

    (variant("invalid-json") / "config.json").write_text('{"schema_version": "v1", "modes": {', encoding="utf-8")
    wrong = variant("wrong-schema")
    (wrong / "config.json").write_text(json.dumps({"schema_version": "v9", "package_name": "x"}), encoding="utf-8")
    missing = variant("missing-step")
    cfg = json.loads((missing / "config.json").read_text())
    cfg["modes"]["apply"][0]["path"] = "no-such-step.sh"
    (missing / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    not_exec = variant("not-executable")
    (not_exec / "stage.sh").chmod(stat.S_IRUSR | stat.S_IWUSR)
    expects = variant("expects-config")
    cfg = json.loads((expects / "config.json").read_text())
    cfg["expected_config_files"] = ["required.conf"]
    (expects / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    variant("other-writer")  # a second, healthy package writing the same host files as bench-sleep
    return root


@dataclass
class System:
    """The private stack, the noderoll processes and an API client."""

    stack: ChaosStack
    procs: NoderollProcesses
    images: Path
    api: client.ApiClient
    # Every stage pod and ConfigMap of the session, as seen while they existed.
    recorder: StagePodRecorder

    @property
    def kubeconfig(self) -> str:
        return self.stack.info.kubeconfig

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @contextmanager
    def fleet(self, nodes: int = 1, **options: Any) -> Iterator[Fleet]:
        """Simulated nodes with the broken images available, fast reboots."""
        stores = [self.images, BENCH_PACKAGES]
        with running_fleet(self.stack.info, nodes, image_stores=stores, reboot_seconds=0.5, **options) as fleet:
            yield fleet

    # --- objects ------------------------------------------------------------------------------

    def policy(self, budget_percent: int = 100, initial_batch: int = 10) -> str:
        name = unique_name("bad-policy")
        self.custom.create_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, {
            "apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": {"name": name},
            "spec": {"default": {"budget": {"percent": budget_percent},
                                 "strategy": {"type": "fixed", "initialBatch": initial_batch}}}})
        return name

    def package(self, fleet: Fleet, stage_seconds: float = 0, **spec: Any) -> str:
        """Apply a Package for `fleet`'s nodes: bench-sleep (unless `image`), stages of `stage_seconds`, no
        interrupt unless given, a policy of its own unless `deploymentPolicy`; `env` is a dict."""
        name = spec.pop("name", None) or unique_name("bad")
        env = [{"name": k, "value": v} for k, v in sorted(spec.pop("env", {}).items())]
        policy = spec.pop("deploymentPolicy") if "deploymentPolicy" in spec else self.policy()
        body = package_spec(spec.pop("image", SLEEP_IMAGE), policy=policy,
                            labels={PREFIX_LABEL: fleet.options.name_prefix}, stage_seconds=stage_seconds,
                            env=env, **spec)
        self.custom.create_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, package_object(name, body))
        return name

    def delete(self, plural: str, name: str) -> None:
        self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)

    # --- what a user sees ---------------------------------------------------------------------

    def package_object(self, name: str) -> dict[str, Any]:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return self.package_object(name).get("status") or {}

    def wait_status(self, name: str, check: Any, timeout: float = ROLLOUT_TIMEOUT) -> dict[str, Any]:
        """Wait until `check(status)` is truthy (a predicate, or assertions ending in `return True`);
        returns the status."""
        def probe() -> dict[str, Any]:
            status = self.status(name)
            assert check(status), status
            return status

        return assert_eventually(probe, timeout=timeout, interval=0.5)

    def wait_complete(self, name: str, nodes: int, timeout: float = ROLLOUT_TIMEOUT) -> dict[str, Any]:
        return self.wait_status(name, lambda s: s.get("phase") == "Complete"
                                and (s.get("nodes") or {}).get("complete") == nodes, timeout)

    def node(self, name: str) -> client.V1Node:
        return self.core.read_node(name)

    def node_state(self, name: str) -> tuple[NodeState, str | None]:
        return parse_node_state((self.node(name).metadata.annotations or {}).get(NODE_STATE_ANNOTATION))

    def node_status_label(self, name: str) -> str | None:
        return (self.node(name).metadata.labels or {}).get(NODE_STATUS_LABEL)

    def cordoned(self, fleet: Fleet) -> list[str]:
        return [n for n in fleet.node_names if self._unschedulable(n)]

    def _unschedulable(self, node: str) -> bool:
        try:
            return bool(self.node(node).spec.unschedulable)
        except client.exceptions.ApiException as err:
            if err.status == 404:
                return False
            raise

    def stage_pods(self, package: str) -> list[client.V1Pod]:
        """Every stage pod that ran for `package` (recorded: a window deletes its pods once its outcome
        is on the node, issue #14), oldest first."""
        return [j for j in self.recorder.pods() if (j.metadata.labels or {}).get("noderoll.io/package") == package]

    def events(self, node: str) -> list[str]:
        found = self.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
        return [f"{e.reason}: {e.message}" for e in found]


def erroring_reason(status: dict[str, Any], node: str) -> str:
    """The reason the Package status gives for an erroring node ('' when not listed)."""
    return next((e.get("reason", "") for e in status.get("erroringNodes") or [] if e.get("node") == node), "")


def blocked_reason(status: dict[str, Any], node: str) -> str:
    return next((e.get("reason", "") for e in status.get("blockedNodes") or [] if e.get("node") == node), "")


def new_system(tmp: Path) -> System:
    stack = ChaosStack.start(tmp / "stack")
    procs = NoderollProcesses(stack.info, tmp / "procs", env=FAST_RETRIES, private_stack=True)
    try:
        procs.start_worker()
        procs.wait_leading(procs.start_bridge())
    except BaseException:
        procs.stop_all()
        stack.stop()
        raise
    images = build_image_store(tmp / "images")
    api = config.new_client_from_config(config_file=stack.info.kubeconfig)
    return System(stack, procs, images, api, StagePodRecorder(api).start())
