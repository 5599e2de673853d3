"""Machinery of the reliability suite: a private stack whose components can be restarted, and
watchers that record what must never happen (a stage pod created twice, a PodDisruptionBudget under
its minimum); the noderoll processes it kills are tests/helpers/processes.py's. Sleeps and polls
(allowed here, not in tests).

    stack = ChaosStack.start(tmp_dir)          # its own Temporal + control plane
    stack.restart("temporal")                   # stop the component, `up` starts it again
    audit = StagePodAudit(kube_api).start()     # every stage pod uid by (node, package, version, mode)
    pdbs = PdbWatcher(kube_api, namespace).start()
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from api.keys import (
    GROUP,
    PACKAGE_PLURAL,
    PACKAGE_POD_NAMESPACE,
    STAGE_COMPONENT,
    STAGE_COMPONENT_LABEL,
    STAGE_MODE_LABEL,
    STAGE_NODE_LABEL,
    STAGE_PACKAGE_LABEL,
    STAGE_VERSION_ANNOTATION,
    VERSION,
)
from localstack.processes import stop
from localstack.stack import down, ports_held, up
from localstack.state import StackInfo

PDB_SAMPLE_SECONDS = 0.25


@dataclass
class ChaosStack:
    """A private local stack for one test module (the shared stack must not be restarted)."""

    state_dir: Path
    info: StackInfo

    @classmethod
    def start(cls, state_dir: Path) -> ChaosStack:
        try:
            return cls(state_dir, up(state_dir))
        except BaseException:
            down(state_dir)
            raise

    def restart(self, component: str, down_seconds: float = 0.0) -> None:
        """Stop one component (SIGTERM its group), keep it down `down_seconds`, and start it again on
        the same port and data. The machine-wide port lock is held meanwhile: a stack starting in another
        test process (`scripts/test` runs two) would otherwise be free to take the port."""
        with ports_held():
            stop(self.info.components[component])
            time.sleep(down_seconds)
            self.info = up(self.state_dir)

    def stop(self) -> None:
        down(self.state_dir, purge=True)


def _key(obj: Any) -> tuple[str, str, str, str]:
    labels = obj.metadata.labels or {}
    version = (obj.metadata.annotations or {}).get(STAGE_VERSION_ANNOTATION, "")
    return (labels.get(STAGE_NODE_LABEL, ""), labels.get(STAGE_PACKAGE_LABEL, ""), version, labels.get(STAGE_MODE_LABEL, ""))


@dataclass
class StagePodAudit:
    """Every stage pod ever created (by uid) per (node, package, version, mode); survives apiserver restarts."""

    kubeconfig: str
    pods: dict[tuple[str, str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> StagePodAudit:
        threading.Thread(target=self._run, daemon=True, name="stage-pod-audit").start()
        return self

    def _record(self, pod: Any) -> None:
        with self._lock:
            self.pods[_key(pod)].add(pod.metadata.uid)

    def _run(self) -> None:
        api = config.new_client_from_config(config_file=self.kubeconfig)
        core = client.CoreV1Api(api)
        selector = f"{STAGE_COMPONENT_LABEL}={STAGE_COMPONENT}"
        while not self._stop.is_set():
            try:
                listing = core.list_namespaced_pod(PACKAGE_POD_NAMESPACE, label_selector=selector)
                for pod in listing.items:
                    self._record(pod)
                for event in watch.Watch().stream(core.list_namespaced_pod, PACKAGE_POD_NAMESPACE,
                                                  label_selector=selector,
                                                  resource_version=listing.metadata.resource_version,
                                                  timeout_seconds=30):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(event["object"])
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - apiserver restarting: list again (a pod is kept until its window ends)
                time.sleep(0.5)

    def count(self, package: str) -> int:
        """Stage pods of `package` seen so far (the stack may hold earlier tests' pods too)."""
        with self._lock:
            return sum(len(uids) for key, uids in self.pods.items() if key[1] == package)

    def duplicates(self, package: str) -> dict[tuple[str, str, str, str], int]:
        """Keys of `package` with more than one pod."""
        with self._lock:
            return {k: len(v) for k, v in self.pods.items() if k[1] == package and len(v) > 1}

    def stop(self) -> None:
        self._stop.set()


@dataclass
class PdbWatcher:
    """Samples every PDB of a namespace: the fewest available (Running, Ready, not deleting) pods seen."""

    kubeconfig: str
    namespace: str
    minimum: dict[str, int] = field(default_factory=dict)
    required: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> PdbWatcher:
        threading.Thread(target=self._run, daemon=True, name="pdb-watch").start()
        return self

    def _sample(self, api: client.ApiClient) -> None:
        core = client.CoreV1Api(api)
        pdbs = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "policy", "v1beta1", self.namespace, "poddisruptionbudgets")["items"]
        pods = core.list_namespaced_pod(self.namespace).items
        for pdb in pdbs:
            name = pdb["metadata"]["name"]
            selector = pdb["spec"]["selector"]["matchLabels"]
            matching = [p for p in pods if all((p.metadata.labels or {}).get(k) == v for k, v in selector.items())]
            available = sum(1 for p in matching if _available(p))
            self.minimum[name] = min(self.minimum.get(name, available), available)
            # desiredHealthy: what the disruption controller requires (replicas - maxUnavailable).
            desired = int((pdb.get("status") or {}).get("desiredHealthy", 0))
            self.required[name] = max(self.required.get(name, 0), desired)
        self.samples += 1

    def _run(self) -> None:
        api = config.new_client_from_config(config_file=self.kubeconfig)
        while not self._stop.wait(PDB_SAMPLE_SECONDS):
            try:
                self._sample(api)
            except Exception:  # noqa: BLE001 - apiserver restarting: nothing can be evicted meanwhile
                continue

    def violations(self) -> dict[str, tuple[int, int]]:
        """PDBs whose minimum available pods fell under what they require: name -> (min, required)."""
        return {n: (m, self.required[n]) for n, m in self.minimum.items() if n in self.required and m < self.required[n]}

    def stop(self) -> None:
        self._stop.set()


def _available(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or (pod.status.phase or "") != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def package_status(kubeconfig: str, name: str) -> dict[str, Any]:
    """The Package's status (empty when none yet); raises ApiException while the apiserver is down."""
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        obj = client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, PACKAGE_PLURAL, name)
    finally:
        api.close()
    return obj.get("status") or {}


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll `predicate` (exceptions count as False) until true; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (ApiException, OSError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
