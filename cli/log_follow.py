"""`noderoll logs PACKAGE --node N --follow`: stream a stage pod's log while it runs. Does I/O.

The pod: the newest stage pod of the Package on the node (of `--mode` when given); when there is
none yet, the command waits for one (up to `--wait-seconds`). Its containers are followed one
after the other in the order they run (the package copy, the stage, its check), each from the
moment it starts until it ends:
* `pods/log?follow=true` (a kubelet serves it), the way `kubectl logs -f` does;
* where no kubelet answers (fleetsim nodes), fleetsim's copy of the pod's log in the node's sandbox
  (`--sandbox-dir`, `NODEROLL_SANDBOX_DIR` or fleetsim's default folder), which fleetsim writes
  line by line as the agent prints, read as it grows until the pod ends;
* else, once the pod ended, the log tail the kubelet kept in each container's termination message.
Headers go to stderr, the log itself to stdout.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

import kube
from api import keys
from cli.ops_client import FLEETSIM_LABEL, FLEETSIM_POD_LOGS, Ops, OpsError

POLL_SECONDS = 0.5
# A pod deleted while it was followed is taken as ended (phase "Unknown": its last state is not known).
GONE = "Unknown"
FINISHED = ("Succeeded", "Failed", GONE)


def _newest(ops: Ops, package: str, node: str, mode: str | None) -> k8s.V1Pod | None:
    pods = ops.stage_pods(package, node, mode)
    return pods[-1] if pods else None


def _wait_for_pod(ops: Ops, package: str, node: str, mode: str | None, wait_seconds: float) -> k8s.V1Pod:
    deadline = time.monotonic() + wait_seconds
    while True:
        pod = _newest(ops, package, node, mode)
        if pod is not None:
            return pod
        if time.monotonic() >= deadline:
            raise OpsError(f"no stage pod of {package} on {node}" + (f" with mode {mode}" if mode else "")
                           + f" in namespace {keys.PACKAGE_POD_NAMESPACE} after {wait_seconds:.0f}s")
        time.sleep(POLL_SECONDS)


def _read(ops: Ops, pod: k8s.V1Pod) -> k8s.V1Pod:
    """The pod now; once deleted (its window recorded the outcome and deleted its pod), the pod as last
    seen, taken as ended."""
    try:
        return ops.core.read_namespaced_pod(pod.metadata.name, keys.PACKAGE_POD_NAMESPACE)
    except ApiException as err:
        if not kube.is_not_found(err):
            raise
    if pod.status is not None and (pod.status.phase or "") not in FINISHED:
        pod.status.phase = GONE  # it ran: its outcome is on the node (`noderoll nodes`)
    return pod


def _started(pod: k8s.V1Pod, container: str) -> bool:
    statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
    for status in statuses:
        if status.name == container and status.state and (status.state.running or status.state.terminated):
            return True
    return (pod.status.phase or "") in FINISHED


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _follow_container(ops: Ops, pod: k8s.V1Pod, container: str) -> bool:
    """Stream one container through pods/log; False when no kubelet serves it."""
    while not _started(pod, container):
        time.sleep(POLL_SECONDS)
        pod = _read(ops, pod)
    try:
        stream = ops.core.read_namespaced_pod_log(
            pod.metadata.name, keys.PACKAGE_POD_NAMESPACE, container=container, follow=True,
            _preload_content=False, _request_timeout=(5, None))
    except ApiException:
        return False
    except Exception:  # noqa: BLE001 - urllib3 timeouts and socket errors: no kubelet
        return False
    for chunk in stream.stream(1024):
        _write(chunk.decode("utf-8", "replace"))
    return True


def _follow_file(ops: Ops, pod: k8s.V1Pod, path: Path) -> None:
    """Print `path` as it grows until the pod ended and nothing more came."""
    offset = 0
    while True:
        finished = (_read(ops, pod).status.phase or "") in FINISHED
        if path.is_file():
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            offset += len(data)
            if data:
                _write(data.decode("utf-8", "replace"))
        if finished:
            return
        time.sleep(POLL_SECONDS)


def follow(ops: Ops, package: str, node: str, options: tuple[str | None, float, list[Path]]) -> str:
    """Follow the newest stage pod of `package` on `node` (module rules); returns the source used."""
    mode, wait_seconds, sandbox_dirs = options
    pod = _wait_for_pod(ops, package, node, mode, wait_seconds)
    name = pod.metadata.name
    print(f"== {name} (following)", file=sys.stderr)
    containers = [c.name for c in [*(pod.spec.init_containers or []), *(pod.spec.containers or [])]]
    # A simulated node has no kubelet to serve pods/log: asking would only wait for a dial timeout.
    simulated = (ops.core.read_node(node).metadata.labels or {}).get(FLEETSIM_LABEL) == "true"
    if not simulated and all(_follow_container(ops, pod, c) for c in containers):
        return "pods/log (follow)"
    if simulated:
        # fleetsim creates the pod's log file when the pod starts (after its modelled start-up), so a
        # pod found while Pending has none yet: wait for it (or for the pod to end without one).
        while True:
            for root in sandbox_dirs:
                path = root / node / FLEETSIM_POD_LOGS / f"{name}.log"
                if path.is_file():
                    _follow_file(ops, pod, path)
                    return f"fleetsim log file {path}"
            if (pod.status.phase or "") in FINISHED:
                break
            time.sleep(POLL_SECONDS)
            pod = _read(ops, pod)
    while (pod.status.phase or "") not in FINISHED:
        time.sleep(POLL_SECONDS)
        pod = _read(ops, pod)
    log = ops.stage_log(pod, [])
    _write(log.text if log.text.endswith("\n") or not log.text else log.text + "\n")
    return log.source
