"""Stage pods (the stage pod contract): run the package agent for each container's mode on the node's sandbox. I/O.

The containers run in order, as a kubelet runs them, stopping at the first that fails:

* the init container `package` (the copy from the Package's image): its image resolves through the
  image store to a package folder, copied into the pod's temporary `package` folder;
* every other container is noderoll's agent (whatever its image): the agent's `<mode> --simulate`
  against `<sandbox-dir>/<node>/` with the container's environment, the package copy, and the
  ConfigMap volumes (the package's config, the node's metadata) read through the API into temporary
  folders. It runs in a child forked from fleetsim's warm agent zygote (`fleetsim.zygote`), not in a
  new interpreter (issue #14: the simulator's own CPU must stay small). With `--simulate` the agent
  confines every step to the sandbox (agent.sandbox: a private mount namespace and a chroot, entered
  by that child alone), so a step writing `/etc/x` writes `<sandbox>/etc/x`, never the machine's;
  where that is impossible the agent refuses and the pod fails (exit 71).

The pod starts `pod_startup_seconds` (default 1 s) after fleetsim saw it bound: the kubelet's pod
sandbox and image pulls, modelled as a fixed delay (`fleetsim/kubelet.py`).

Pods from before the copy container (no `package` init container) resolve their main container's
image as the package. The pod ends Succeeded or Failed with each container's real exit code and log
tail in its `state.terminated.message` (on success too: there is no `kubectl logs` for a simulated
pod); the whole log stays in `<root>/var/log/noderoll/pods/<pod>.log`, written line by line as the
containers print (`noderoll logs --follow` reads it as it grows). A window's GPU verify pod (mode
`verify`) runs no agent: the simulated GPUs answer (`fleetsim/verify.py`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from api.keys import STAGE_MODE_LABEL, STAGE_PACKAGE_CONTAINER
from api.stage_containers import is_copy
from fleetsim import podstatus, reboot, verify
from fleetsim.context import SimContext, SimNode
from fleetsim.kube import KubeError, patch_status, quoted
from fleetsim.nodes import node_ip, now_rfc3339

log = logging.getLogger(__name__)
PACKAGE_MOUNT = "/noderoll-package"
CONFIG_MOUNT = "/noderoll-config"
METADATA_MOUNT = "/noderoll-node-metadata"
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
    return args[0] if args else pod_env(pod, chosen).get("NODEROLL_MODE") or pod["metadata"].get("labels", {}).get(STAGE_MODE_LABEL, "")


def _config_map_volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Volume name -> configMap source, for the ConfigMap volumes some container mounts. Pure."""
    volumes = {v["name"]: v["configMap"] for v in pod["spec"].get("volumes") or [] if "configMap" in v}
    mounted = {m["name"] for c in pod_steps(pod) for m in c.get("volumeMounts") or []}
    return {name: source for name, source in volumes.items() if name in mounted}


def _write_config_maps(ctx: SimContext, pod: dict[str, Any], workdir: Path) -> dict[str, Path] | None:
    """Fetch each mounted ConfigMap volume into a folder of its own (honouring `items`); volume name
    -> folder, or None when one does not exist yet (and is not optional)."""
    fetched: dict[str, dict[str, Any] | None] = {}
    folders: dict[str, Path] = {}
    for volume_name, volume in _config_map_volumes(pod).items():
        name = volume["name"]
        if name not in fetched:
            path = f"/api/v1/namespaces/{quoted(pod['metadata']['namespace'])}/configmaps/{quoted(name)}"
            try:
                fetched[name] = ctx.kube.request("GET", path)
            except KubeError as err:
                if err.status != 404:
                    raise
                fetched[name] = None
        cm = fetched[name]
        if cm is None:
            if volume.get("optional"):
                continue
            return None
        target = workdir / "volumes" / volume_name
        target.mkdir(parents=True, exist_ok=True)
        data = {k: v.encode("utf-8") for k, v in (cm.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
        items = volume.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            if item["key"] in data:
                (target / item["path"]).parent.mkdir(parents=True, exist_ok=True)
                (target / item["path"]).write_bytes(data[item["key"]])
        folders[volume_name] = target
    return folders


def _package_sources(ctx: SimContext, pod: dict[str, Any]) -> tuple[dict[str, Path | None], str]:
    """Per copy container (`package`, `p<i>-package`: api.stage_containers) the package folder its
    image resolves to, and the first image that resolves to none ("" when all do). Pods from before
    the copy container resolve their main container's image, under the name ""."""
    copies = [c for c in pod_steps(pod) if is_copy(c.get("name", ""))]
    found: dict[str, Path | None] = {}
    missing = ""
    for container in copies or [_container(pod)]:
        image = container.get("image", "")
        found[container.get("name", "") if copies else ""] = resolved = ctx.images.resolve(image)
        if resolved is None and not missing:
            missing = image
    return found, missing


def _mounts(container: dict[str, Any], folders: dict[str, Path], legacy: Path | None) -> _Mounts:
    """The folders an agent container sees, from its own volumeMounts (as a kubelet mounts them):
    the package copy at /noderoll-package, the config and node metadata at theirs. `legacy`: the
    package of a pod from before the copy container."""
    by_path = {m.get("mountPath", ""): folders.get(m["name"]) for m in container.get("volumeMounts") or []}
    return _Mounts(package=by_path.get(PACKAGE_MOUNT) or legacy, config=by_path.get(CONFIG_MOUNT),
                   metadata=by_path.get(METADATA_MOUNT))


def _copy_target(container: dict[str, Any], workdir: Path) -> tuple[str, Path]:
    """The volume a copy container writes the package into (its one mount) and that volume's folder."""
    mounts = container.get("volumeMounts") or [{"name": "package"}]
    name = mounts[0]["name"]
    return name, workdir / "volumes" / name


def _is_reboot(env: dict[str, str]) -> bool:
    try:
        return json.loads(env.get("NODEROLL_INTERRUPT") or "{}").get("type") in ("reboot", "node_restart")
    except (ValueError, AttributeError):
        return False


class After(Enum):
    """What the kubelet does with the pod once `run_stage_pod` returned (the kubelet owns the pod bookkeeping)."""

    NOTHING = "nothing"  # ended, hangs, or was deleted: the pod's own events say the rest
    NODE_DOWN = "node_down"  # not started, the node reboots: forget the start, `resume_node` starts it
    RETRY = "retry"  # a ConfigMap is missing: forget the start, look at the pod again after a while


def run_stage_pod(ctx: SimContext, node: SimNode, pod: dict[str, Any], resume: reboot.Resume) -> After:
    """Play kubelet for one stage pod, from Pending to Succeeded/Failed (runs on the pool).

    Returns what the kubelet (which owns the pod bookkeeping, `fleetsim/kubelet.py`) does with the
    pod next. `resume` is the kubelet's `resume_node`, called when a reboot this pod's interrupt
    began is over (passed in: this module does not import the kubelet).
    """
    uid = pod["metadata"]["uid"]
    with ctx.lock:
        if uid in ctx.terminating or uid not in ctx.started:
            return After.NOTHING  # deleted during its start-up
    if node.rebooting:
        return After.NODE_DOWN  # the node went down first: `kubelet.resume_node` starts it
    if verify.is_verify_pod(pod):
        verify.run_verify_pod(ctx, node, pod)  # no package, no agent: the simulated GPUs answer
        return After.NOTHING
    sources, missing = _package_sources(ctx, pod)
    interrupt_only = all(pod_mode(pod, c) == "interrupt" for c in pod_steps(pod))
    if missing and not interrupt_only:
        patch_status(ctx.kube, pod, podstatus.waiting_status(pod, "ErrImagePull", f"fleetsim image store has no {missing}"))
        return After.NOTHING
    workdir = Path(tempfile.mkdtemp(prefix="fleetsim-pod-"))
    try:
        try:
            folders = _write_config_maps(ctx, pod, workdir)
        except KubeError as err:
            if not err.transient:
                raise
            # The apiserver did not answer (restarting): nothing ran yet, so start again later, as a
            # kubelet retries its volume mounts. Without this the pod stayed Pending for good.
            log.warning("stage pod %s: config maps not readable (%s); retried", pod["metadata"]["name"], err)
            return After.RETRY
        if folders is None:
            patch_status(ctx.kube, pod, podstatus.waiting_status(pod, "ContainerCreating", "configmap not found"))
            return After.RETRY
        started = now_rfc3339()
        ip = node_ip(node.index)
        patch_status(ctx.kube, pod, podstatus.stage_running_status(pod, ip, ip, started))
        legacy = sources.get("")
        results: list[tuple[str, int, str]] = []
        times: dict[str, tuple[str, str]] = {}
        _log_path(ctx, node, pod).write_text("", encoding="utf-8")
        for container in pod_steps(pod):
            began = now_rfc3339()
            copy = is_copy(container.get("name", ""))
            if copy:
                volume, target = _copy_target(container, workdir)
                result: tuple[str, int, str] | None = _copy_package(sources.get(container["name"]), target,
                                                                    container["name"])
                folders[volume] = target
            else:
                result = _run_container(ctx, node, pod, (container, _mounts(container, folders, legacy)), resume)
            if result is None:
                return After.NOTHING  # hangs (fault) or was deleted: stays as it is until deleted
            if copy:
                _append_log(ctx, node, pod, result[2])  # an agent container's output is in the file already
            times[result[0]] = (began, now_rfc3339())
            results.append(result)
            if result[1] != 0:
                break
        _keep_log(ctx, node, pod, "".join(output for _, _, output in results))
        tails = [(name, code, podstatus.log_tail(output)) for name, code, output in results]
        patch_status(ctx.kube, pod, podstatus.finished_status(pod, tails, (started, now_rfc3339()), times))
        return After.NOTHING
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass(frozen=True)
class _Mounts:
    """The folders an agent container sees: package copy, config files, node metadata."""

    package: Path | None
    config: Path | None
    metadata: Path | None


def _copy_package(source: Path | None, target: Path, name: str = STAGE_PACKAGE_CONTAINER) -> tuple[str, int, str]:
    """A copy container: the image's package folder into the pod's package volume (its folder)."""
    if source is None:
        return name, 66, "noderoll-agent: FAILED: image has no package folder\n"
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    return name, 0, f"noderoll: copied package from {source}\n"


def _run_container(ctx: SimContext, node: SimNode, pod: dict[str, Any],
                   what: tuple[dict[str, Any], _Mounts], resume: reboot.Resume) -> tuple[str, int, str] | None:
    """Run one agent container of a stage pod: (name, exit code, output), None when it does not end."""
    container, mounts = what
    uid, mode, env = pod["metadata"]["uid"], pod_mode(pod, container), pod_env(pod, container)
    with ctx.lock:
        if uid in ctx.terminating or uid not in ctx.started:
            return None  # deleted between two containers
    package, version = env.get("NODEROLL_PACKAGE", ""), env.get("NODEROLL_VERSION", "")
    if ctx.options.faults.take("hang", node.name, mode, package, version) is not None:
        log.info("pod %s on %s hangs in %s (fault)", pod["metadata"]["name"], node.name, mode)
        return None
    fault = ctx.options.faults.take("fail-stage", node.name, mode, package, version)
    if fault is not None:
        output = f"fleetsim: injected fault fail-stage on {node.name} mode {mode}: exit {fault.exit_code}\n"
        _append_log(ctx, node, pod, output)
        return container.get("name", mode), fault.exit_code, output
    code, output = _run_agent(ctx, node, pod, (container, mounts))
    if code == 0 and mode == "interrupt" and _is_reboot(env):
        reboot.begin_reboot(ctx, node, resume)
    return container.get("name", mode), code, output


def _run_agent(ctx: SimContext, node: SimNode, pod: dict[str, Any],
               what: tuple[dict[str, Any], _Mounts]) -> tuple[int, str]:
    container, mounts = what
    mode = pod_mode(pod, container)
    root = ctx.sandbox(node.name)
    root.mkdir(parents=True, exist_ok=True)
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env.update(pod_env(pod, container))
    env.update(NODEROLL_SIMULATE="1", NODEROLL_NODE=node.name, FLEETSIM_TIME_FACTOR=f"{node.time_factor:g}")
    argv = [mode, "--root", str(root), "--simulate"]
    for flag, folder in (("--package-dir", mounts.package), ("--config-dir", mounts.config),
                         ("--node-metadata-dir", mounts.metadata)):
        # An absent folder is passed as one that does not exist: the agent must not look at the
        # machine's own /noderoll-config (the container's variables name those paths).
        argv += [flag, str(folder if folder is not None else root / ".absent" / flag.strip("-"))]
    proc = ctx.agents.run(argv, env, str(root))
    uid = pod["metadata"]["uid"]
    ctx.procs[uid] = proc
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        # Line by line into the pod's log file, so `noderoll logs --follow` sees it as it runs.
        with _log_path(ctx, node, pod).open("a", encoding="utf-8") as kept:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                lines.append(line)
                kept.write(line)
                kept.flush()
        proc.stdout.close()
        proc.wait()
    finally:
        ctx.procs.pop(uid, None)
    code = proc.returncode if proc.returncode is not None else -1
    # Killed by a signal: report it like a container runtime does (128 + signal number).
    return (128 - code if code < 0 else code), "".join(lines)


def _log_path(ctx: SimContext, node: SimNode, pod: dict[str, Any]) -> Path:
    logs = ctx.sandbox(node.name) / "var" / "log" / "noderoll" / "pods"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{pod['metadata']['name']}.log"


def _append_log(ctx: SimContext, node: SimNode, pod: dict[str, Any], output: str) -> None:
    with _log_path(ctx, node, pod).open("a", encoding="utf-8") as kept:
        kept.write(output)


def _keep_log(ctx: SimContext, node: SimNode, pod: dict[str, Any], output: str) -> None:
    logs = ctx.sandbox(node.name) / "var" / "log" / "noderoll" / "pods"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{pod['metadata']['name']}.log").write_text(output, encoding="utf-8")
