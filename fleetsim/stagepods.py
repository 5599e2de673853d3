"""Stage pods (the stage pod contract): run the package agent for each container's mode on the node's sandbox. I/O.

The image resolves through the image store to a package folder, the ConfigMap volume is read through
the API into a temporary config dir, and `python -m agent <mode> --simulate` runs against
`<sandbox-dir>/<node>/` with the container's environment, for the init containers in order (the
stage) and then the container (its check), stopping at the first that fails, as a kubelet does.
The pod then ends Succeeded or Failed with each container's real exit code and log tail in its
`state.terminated.message` (on success too: there is no `kubectl logs` for a simulated pod); the
whole log stays in `<root>/var/log/noderoll/pods/<pod>.log`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fleetsim import podstatus, reboot
from fleetsim.context import SimContext, SimNode
from fleetsim.kube import KubeError, patch_status, quoted
from fleetsim.nodes import node_ip, now_rfc3339

log = logging.getLogger(__name__)
CONFIG_MOUNT = "/noderoll-config"
CONFIGMAP_RETRY_SECONDS = 2.0
# Environment a real container would not inherit from fleetsim, apart from what Python needs.
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "HOME", "TMPDIR")


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    containers = pod["spec"].get("containers") or [{}]
    return next((c for c in containers if c.get("name") == "agent"), containers[-1])


def pod_steps(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers in the order a kubelet runs them: init containers, then the container. Pure."""
    spec = pod["spec"]
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])] or [{}]


def pod_env(pod: dict[str, Any], container: dict[str, Any] | None = None) -> dict[str, str]:
    """A container's environment (default: the main one): literal values and the usual fieldRefs. Pure."""
    fields = {
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
    }
    env: dict[str, str] = {}
    for item in (container or _container(pod)).get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif (ref := (item.get("valueFrom") or {}).get("fieldRef")) and ref.get("fieldPath") in fields:
            env[item["name"]] = fields[ref["fieldPath"]]
    return env


def pod_mode(pod: dict[str, Any], container: dict[str, Any] | None = None) -> str:
    """A container's mode: its first argument, else NODEROLL_MODE, else the mode label. Pure."""
    chosen = container or _container(pod)
    args = chosen.get("args") or []
    return args[0] if args else pod_env(pod, chosen).get("NODEROLL_MODE") or pod["metadata"].get("labels", {}).get("noderoll.io/mode", "")


def _config_volume(pod: dict[str, Any]) -> dict[str, Any] | None:
    mounts = {m["name"]: m.get("mountPath") for c in pod_steps(pod) for m in c.get("volumeMounts") or []}
    volumes = [v for v in pod["spec"].get("volumes") or [] if "configMap" in v]
    preferred = [v for v in volumes if mounts.get(v["name"]) == CONFIG_MOUNT]
    chosen = (preferred or volumes or [None])[0]
    return chosen["configMap"] if chosen else None


def _write_config(ctx: SimContext, pod: dict[str, Any], target: Path) -> bool:
    """Fetch the ConfigMap into target; False when it does not exist yet (and is not optional)."""
    volume = _config_volume(pod)
    if volume is None:
        return True
    path = f"/api/v1/namespaces/{quoted(pod['metadata']['namespace'])}/configmaps/{quoted(volume['name'])}"
    try:
        cm = ctx.kube.request("GET", path)
    except KubeError as err:
        if err.status == 404:
            return bool(volume.get("optional"))
        raise
    for key, value in (cm.get("data") or {}).items():
        (target / key).write_text(value, encoding="utf-8")
    for key, value in (cm.get("binaryData") or {}).items():
        (target / key).write_bytes(base64.b64decode(value))
    return True


def _is_reboot(env: dict[str, str]) -> bool:
    try:
        return json.loads(env.get("NODEROLL_INTERRUPT") or "{}").get("type") in ("reboot", "node_restart")
    except (ValueError, AttributeError):
        return False


def run_stage_pod(ctx: SimContext, node: SimNode, pod: dict[str, Any]) -> None:
    """Play kubelet for one stage pod, from Pending to Succeeded/Failed (runs on the pool)."""
    uid, image = pod["metadata"]["uid"], _container(pod).get("image", "")
    if node.rebooting:
        with ctx.lock:
            ctx.started.discard(uid)  # the node went down first: `kubelet.resume_node` starts it
        return
    package_dir = ctx.images.resolve(image)
    if package_dir is None:
        patch_status(ctx.kube, pod, podstatus.waiting_status(pod, "ErrImagePull", f"fleetsim image store has no {image}"))
        return
    config_dir = Path(tempfile.mkdtemp(prefix="fleetsim-config-"))
    try:
        if not _write_config(ctx, pod, config_dir):
            patch_status(ctx.kube, pod, podstatus.waiting_status(pod, "ContainerCreating", "configmap not found"))
            with ctx.lock:
                ctx.started.discard(uid)  # the next pod event (or the retry below) starts it again
            ctx.scheduler.call_later(CONFIGMAP_RETRY_SECONDS, lambda: _retry(ctx, pod))
            return
        started = now_rfc3339()
        ip = node_ip(node.index)
        patch_status(ctx.kube, pod, podstatus.running_status(pod, ip, ip, (started, started)))
        results: list[tuple[str, int, str]] = []
        for container in pod_steps(pod):
            result = _run_container(ctx, node, pod, (container, package_dir, config_dir))
            if result is None:
                return  # hangs (fault) or was deleted: stays as it is until deleted
            results.append(result)
            if result[1] != 0:
                break
        _keep_log(ctx, node, pod, "".join(output for _, _, output in results))
        tails = [(name, code, podstatus.log_tail(output)) for name, code, output in results]
        patch_status(ctx.kube, pod, podstatus.finished_status(pod, tails, (started, now_rfc3339())))
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)


def _run_container(ctx: SimContext, node: SimNode, pod: dict[str, Any],
                   what: tuple[dict[str, Any], Path, Path]) -> tuple[str, int, str] | None:
    """Run one container of a stage pod: (name, exit code, output), None when it does not end."""
    container, package_dir, config_dir = what
    uid, mode, env = pod["metadata"]["uid"], pod_mode(pod, container), pod_env(pod, container)
    with ctx.lock:
        if uid in ctx.terminating or uid not in ctx.started:
            return None  # deleted between two containers
    package = env.get("NODEROLL_PACKAGE", "")
    if ctx.options.faults.take("hang", node.name, mode, package) is not None:
        log.info("pod %s on %s hangs in %s (fault)", pod["metadata"]["name"], node.name, mode)
        return None
    fault = ctx.options.faults.take("fail-stage", node.name, mode, package)
    if fault is not None:
        output = f"fleetsim: injected fault fail-stage on {node.name} mode {mode}: exit {fault.exit_code}\n"
        return container.get("name", mode), fault.exit_code, output
    code, output = _run_agent(ctx, node, pod, (container, package_dir, config_dir))
    if code == 0 and mode == "interrupt" and _is_reboot(env):
        reboot.begin_reboot(ctx, node)
    return container.get("name", mode), code, output


def _retry(ctx: SimContext, pod: dict[str, Any]) -> None:
    try:
        fresh = ctx.kube.request("GET", f"/api/v1/namespaces/{quoted(pod['metadata']['namespace'])}/pods/{quoted(pod['metadata']['name'])}")
    except KubeError:
        return  # gone
    from fleetsim.kubelet import on_pod_event  # noqa: PLC0415 - kubelet imports this module

    on_pod_event(ctx, "MODIFIED", fresh)


def _run_agent(ctx: SimContext, node: SimNode, pod: dict[str, Any],
               what: tuple[dict[str, Any], Path, Path]) -> tuple[int, str]:
    container, package_dir, config_dir = what
    mode = pod_mode(pod, container)
    root = ctx.sandbox(node.name)
    root.mkdir(parents=True, exist_ok=True)
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env.update(pod_env(pod, container))
    env.update(NODEROLL_SIMULATE="1", NODEROLL_NODE=node.name)
    argv = [sys.executable, "-m", "agent", mode, "--root", str(root), "--package-dir", str(package_dir),
            "--config-dir", str(config_dir), "--simulate"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(root))
    uid = pod["metadata"]["uid"]
    ctx.procs[uid] = proc
    try:
        out, _ = proc.communicate()
    finally:
        ctx.procs.pop(uid, None)
    code = proc.returncode
    # Killed by a signal: report it like a container runtime does (128 + signal number).
    return (128 - code if code < 0 else code), out.decode("utf-8", "replace")


def _keep_log(ctx: SimContext, node: SimNode, pod: dict[str, Any], output: str) -> None:
    logs = ctx.sandbox(node.name) / "var" / "log" / "noderoll" / "pods"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{pod['metadata']['name']}.log").write_text(output, encoding="utf-8")
