"""The stage pod: the Pod manifest of one or several Packages' stages (and their checks) or of an interrupt, and its worker settings. Pure.

Shape (as NodeWright's package pods; docs/architecture.md, "The stage pod contract"), per Package
of the pod, in order:

* its copy init container: the Package's image, `/bin/sh -c` copying its package folder
  (`/noderoll-package`, else NodeWright's `/skyhook-package`) into the Package's own emptyDir.
  Any image with a shell works: a NodeWright image (busybox plus files), or one built FROM
  noderoll's package-base;
* one agent container per mode, in order: noderoll's agent image (the worker's pinned
  `--agent-image`, or the Package's `agentImage`), `args: [<mode>]`. Every container of the pod but
  the last is an init container, so each starts only after the one before succeeded and the
  container that failed names the Package and the mode. A pod runs one Package's stages (each
  followed by its check) or, one pod per window phase (issue #26, ADR 0016), several Packages'; a
  pod of one Package may carry the merged `interrupt` last (the path before issue #26;
  `NODEROLL_INTERRUPT` on that container only); an interrupt pod has only its `interrupt` agent
  container;
* names: a pod of one Package names its containers after their modes (`package` for the copy); a
  pod of several prefixes them with the Package's index (`p1-apply-check`, `p1-package`) and lists
  its Packages in the annotation `noderoll.io/packages` (`api.stage_containers`);
* volumes: the host root (`/host`), each Package's package copy (`/noderoll-package`), its config
  (`/noderoll-config`, keys `p<i>.<file>` in a pod of several) and the node's metadata
  (`/noderoll-node-metadata`), the last two projected from the pod's ConfigMap (an interrupt pod
  has the host root only, and no ConfigMap; an interrupt container mounts the host root and the
  metadata only);
* NodeWright's environment, each Package its own: `SKYHOOK_RESOURCE_ID`
  (`<package>-<uid>-<generation>_<package>_<version>`, NodeWright's form with the Package in place
  of the Skyhook) and `SKYHOOK_NODE_ORDER`; tolerations and pull secrets of the pod are the union.

Worker settings (`StagePodSettings`, from `noderoll worker` flags or the environment) pin the agent
image and add image pull secrets, host networking and a priority class to every stage pod.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from api.keys import (
    PACKAGE_POD_NAMESPACE,
    STAGE_COMPONENT,
    STAGE_COMPONENT_LABEL,
    STAGE_MODE_LABEL,
    STAGE_NODE_LABEL,
    STAGE_PACKAGE_LABEL,
    STAGE_PACKAGES_ANNOTATION,
    STAGE_VERSION_ANNOTATION,
)
from api.stage_containers import container_name, copy_container_name
from protocol.node_activities import StageJob


def _release() -> str:
    """The installed noderoll's version: the worker pins the agent image it was released with."""
    try:
        return metadata.version("noderoll")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0.1.0"


AGENT_VERSION = _release()

DEFAULT_AGENT_IMAGE = f"ghcr.io/noderoll/agent:{AGENT_VERSION}"
HOST_ROOT = "/host"
CONFIG_DIR = "/noderoll-config"
METADATA_DIR = "/noderoll-node-metadata"
PACKAGE_DIR = "/noderoll-package"
# Where the copy container sees the emptyDir (its own /noderoll-package must stay visible).
PACKAGE_COPY_DIR = "/noderoll-package-copy"
# Keys of the node metadata in the pod's ConfigMap (config keys may not start with `noderoll.`).
METADATA_PREFIX = "noderoll.node-metadata."
METADATA_FILES = ("labels.json", "annotations.json", "packages.json")
# The copy: the first folder holding a config.json; its contents, dotfiles included. Exit 66 is the
# agent's "no config.json" code, and the last line has the agent's FAILED form for the log tail.
COPY_SCRIPT = (
    f"for d in {PACKAGE_DIR} /skyhook-package; do "
    f'if [ -f "$d/config.json" ]; then cd "$d" && cp -R . {PACKAGE_COPY_DIR}/ && '
    'echo "noderoll: copied package from $d" && exit 0; '
    'echo "noderoll-agent: FAILED: copying $d into the pod failed" >&2; exit 71; fi; done; '
    f'echo "noderoll-agent: FAILED: image has no {PACKAGE_DIR}/config.json or /skyhook-package/config.json" >&2; '
    "exit 66"
)


@dataclass(frozen=True)
class StagePodSettings:
    """What the worker adds to every stage pod."""

    agent_image: str = DEFAULT_AGENT_IMAGE
    image_pull_secrets: tuple[str, ...] = ()
    host_network: bool = False
    priority_class_name: str = ""


@dataclass(frozen=True)
class StagePodIdentity:
    """What the activity learns at the pod's creation: the Package's uid and generation (for
    SKYHOOK_RESOURCE_ID) and whether the pod has a ConfigMap with the node's metadata."""

    package_uid: str = ""
    generation: int = 0
    metadata: bool = False


@dataclass
class _Settings:
    current: StagePodSettings | None = None


_SETTINGS = _Settings()
ENV_AGENT_IMAGE = "NODEROLL_AGENT_IMAGE"
ENV_PULL_SECRETS = "NODEROLL_IMAGE_PULL_SECRETS"
ENV_HOST_NETWORK = "NODEROLL_STAGE_HOST_NETWORK"
ENV_PRIORITY_CLASS = "NODEROLL_STAGE_PRIORITY_CLASS"


def settings_from_env(env: dict[str, str] | None = None) -> StagePodSettings:
    """Settings from `NODEROLL_AGENT_IMAGE`, `NODEROLL_IMAGE_PULL_SECRETS` (comma-separated),
    `NODEROLL_STAGE_HOST_NETWORK` (true/false) and `NODEROLL_STAGE_PRIORITY_CLASS`. Pure."""
    values = os.environ if env is None else env
    return StagePodSettings(
        agent_image=values.get(ENV_AGENT_IMAGE) or DEFAULT_AGENT_IMAGE,
        image_pull_secrets=tuple(s.strip() for s in values.get(ENV_PULL_SECRETS, "").split(",") if s.strip()),
        host_network=values.get(ENV_HOST_NETWORK, "").lower() in ("1", "true", "yes"),
        priority_class_name=values.get(ENV_PRIORITY_CLASS, ""),
    )


def configure(settings: StagePodSettings) -> None:
    """Set the settings of this worker process (`noderoll worker` does at start)."""
    _SETTINGS.current = settings


def current_settings() -> StagePodSettings:
    """The configured settings, else those of the environment."""
    if _SETTINGS.current is None:
        _SETTINGS.current = settings_from_env()
    return _SETTINGS.current


def agent_image(job: StageJob, settings: StagePodSettings) -> str:
    """The Package's `agentImage`, else the worker's pinned one. Pure."""
    return job.agent_image or settings.agent_image


def image_tag(image: str) -> str:
    """The tag (or digest) of an image reference, "" when it has neither. Pure."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def resource_id(job: StageJob, identity: StagePodIdentity) -> str:
    """NodeWright's SKYHOOK_RESOURCE_ID with the Package in place of the Skyhook. Pure."""
    return f"{job.package}-{identity.package_uid}-{identity.generation}_{job.package}_{job.version}"


INTERRUPT_MODE = "interrupt"
# The GPU verify's pod (`spec.verify`; its manifest: activities/verify_pod.py): no package, no agent.
VERIFY_MODE = "verify"


def modes(job: StageJob) -> list[str]:
    """The modes the stage pod runs, in order: `job.modes` when given (a stage pod: its stages, each
    followed by its check, maybe the interrupt last), else `job.mode` alone (an interrupt pod). Pure."""
    return list(job.modes) if job.modes else [job.mode]


def runs_package(job: StageJob) -> bool:
    """True when a container of the pod runs package steps (anything but the interrupt): the pod then
    gets the copy container, the package and config volumes and the node's metadata. Pure."""
    return any(mode not in (INTERRUPT_MODE, VERIFY_MODE) for mode in modes(job))


def labels(job: StageJob) -> dict[str, str]:
    """The stage pod's labels (a pod of several Packages: its first one's). Pure."""
    return {STAGE_PACKAGE_LABEL: job.package, STAGE_NODE_LABEL: job.node, STAGE_MODE_LABEL: job.mode,
            STAGE_COMPONENT_LABEL: STAGE_COMPONENT}


def annotations(parts: list[StageJob]) -> dict[str, str]:
    """The stage pod's annotations: the first Package's version and, for a pod of several
    Packages, their names in order (`api.stage_containers`). Pure."""
    found = {STAGE_VERSION_ANNOTATION: parts[0].version}
    if len(parts) > 1:
        found[STAGE_PACKAGES_ANNOTATION] = json.dumps([part.package for part in parts])
    return found


@dataclass(frozen=True)
class _Part:
    """One Package of a stage pod: its job, its identity, its index among the pod's Packages."""

    job: StageJob
    identity: StagePodIdentity
    index: int = 0
    count: int = 1

    def volume(self, base: str) -> str:
        return base if self.count <= 1 else f"p{self.index}-{base}"

    def config_key(self, key: str) -> str:
        """The key of one of the Package's config files in the pod's ConfigMap."""
        return key if self.count <= 1 else f"p{self.index}.{key}"


def _env(part: _Part, mode: str) -> list[dict[str, Any]]:
    job = part.job
    env: list[dict[str, Any]] = [
        {"name": "NODEROLL_PACKAGE", "value": job.package},
        {"name": "NODEROLL_VERSION", "value": job.version},
        {"name": "NODEROLL_NODE", "value": job.node},
        {"name": "NODEROLL_MODE", "value": mode},
        {"name": "NODEROLL_ROOT", "value": HOST_ROOT},
        {"name": "NODEROLL_PACKAGE_DIR", "value": PACKAGE_DIR},
        {"name": "NODEROLL_CONFIG_DIR", "value": CONFIG_DIR},
        {"name": "NODEROLL_NODE_METADATA_DIR", "value": METADATA_DIR},
        {"name": "SKYHOOK_RESOURCE_ID", "value": resource_id(job, part.identity)},
        {"name": "SKYHOOK_NODE_ORDER", "value": str(job.node_order)},
    ]
    if job.interrupt is not None and mode == INTERRUPT_MODE:
        env.append({"name": "NODEROLL_INTERRUPT", "value": json.dumps(job.interrupt, sort_keys=True)})
    return env + list(job.env)


def _agent_container(part: _Part, mode: str, image: str) -> dict[str, Any]:
    job = part.job
    mounts = [{"name": "host", "mountPath": HOST_ROOT}]
    if mode != INTERRUPT_MODE:
        mounts.append({"name": part.volume("package"), "mountPath": PACKAGE_DIR, "readOnly": True})
    if job.config and mode != INTERRUPT_MODE:
        mounts.append({"name": part.volume("config"), "mountPath": CONFIG_DIR, "readOnly": True})
    if part.identity.metadata:
        mounts.append({"name": "node-metadata", "mountPath": METADATA_DIR, "readOnly": True})
    container: dict[str, Any] = {
        # Modes are DNS labels (`apply`, `apply-check`): `kubectl logs -c apply-check` (`p1-apply-check`
        # in a pod of several Packages: api.stage_containers).
        "name": container_name(part.index, part.count, mode),
        "image": image,
        "args": [mode],
        "env": _env(part, mode),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"privileged": True},
        "volumeMounts": mounts,
    }
    if job.resources:
        container["resources"] = job.resources
    return container


def _copy_container(part: _Part) -> dict[str, Any]:
    job = part.job
    container: dict[str, Any] = {
        "name": copy_container_name(part.index, part.count),
        "image": job.image,
        "command": ["/bin/sh", "-c", COPY_SCRIPT],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": part.volume("package"), "mountPath": PACKAGE_COPY_DIR}],
    }
    if job.resources:
        container["resources"] = job.resources
    return container


def _volumes(parts: list[_Part], name: str) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [{"name": "host", "hostPath": {"path": "/"}}]
    for part in parts:
        if runs_package(part.job):
            volumes.append({"name": part.volume("package"), "emptyDir": {}})
        if part.job.config and runs_package(part.job):
            items = [{"key": part.config_key(key), "path": key} for key in sorted(part.job.config)]
            volumes.append({"name": part.volume("config"), "configMap": {"name": name, "items": items}})
    if any(part.identity.metadata for part in parts):
        items = [{"key": METADATA_PREFIX + file, "path": file} for file in METADATA_FILES]
        volumes.append({"name": "node-metadata", "configMap": {"name": name, "items": items}})
    return volumes


def _parts(parts: list[StageJob], identities: list[StagePodIdentity]) -> list[_Part]:
    pairs = zip(parts, identities, strict=True)
    return [_Part(job, identity, index, len(parts)) for index, (job, identity) in enumerate(pairs)]


def _union(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each distinct item once, in order of first appearance (tolerations of several Packages)."""
    seen: dict[str, dict[str, Any]] = {}
    for item in items:
        seen.setdefault(json.dumps(item, sort_keys=True), item)
    return list(seen.values())


def pod_spec(job: StageJob | list[StageJob], name: str, identity: StagePodIdentity | list[StagePodIdentity],
             settings: StagePodSettings) -> dict[str, Any]:
    """The spec of a stage pod (pure): per Package its copy container and its agent containers per
    mode, in order; a list of jobs is a pod of several Packages (one pod per window phase, ADR 0016:
    each Package its own package and config volumes and environment; tolerations and pull secrets
    are the union)."""
    jobs = job if isinstance(job, list) else [job]
    parts = _parts(jobs, identity if isinstance(identity, list) else [identity])
    containers: list[dict[str, Any]] = []
    for part in parts:
        image = agent_image(part.job, settings)
        if runs_package(part.job):
            containers.append(_copy_container(part))
        containers.extend(_agent_container(part, mode, image) for mode in modes(part.job))
    spec: dict[str, Any] = {
        "nodeName": jobs[0].node,
        "restartPolicy": "Never",
        "hostPID": True,
        "tolerations": _union([t for part in jobs for t in part.tolerations]),
        "containers": containers[-1:],
        "volumes": _volumes(parts, name),
    }
    if containers[:-1]:
        spec["initContainers"] = containers[:-1]
    return with_worker_settings(spec, jobs, settings)


def with_worker_settings(spec: dict[str, Any], jobs: list[StageJob], settings: StagePodSettings) -> dict[str, Any]:
    """`spec` with what the worker adds to every pod it runs on a node (stage, interrupt and verify
    pods): the pull secrets (the worker's, then the jobs'), host networking and the priority class."""
    secrets = list(dict.fromkeys([*settings.image_pull_secrets, *(s for part in jobs for s in part.image_pull_secrets)]))
    if secrets:
        spec["imagePullSecrets"] = [{"name": secret} for secret in secrets]
    if settings.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if settings.priority_class_name:
        spec["priorityClassName"] = settings.priority_class_name
    return spec


def pod_manifest(job: StageJob | list[StageJob], name: str,
                 identity: StagePodIdentity | list[StagePodIdentity] | None = None,
                 settings: StagePodSettings | None = None) -> dict[str, Any]:
    """The stage pod itself (pure): a bare Pod pinned with nodeName, restartPolicy Never, its
    deadline the sum of its Packages' stage timeouts (the kubelet enforces it). No Job around it
    (ADR 0018): noderoll owns the retries (a new pod per attempt), so a Job's only work was to create
    the pod, at the cost of a Job, two Events and a controller round trip per pod. A list of jobs: a
    pod of several Packages, named and labelled after the first."""
    jobs = job if isinstance(job, list) else [job]
    if identity is None:
        identity = [StagePodIdentity() for _ in jobs]
    spec = pod_spec(jobs, name, identity, settings or current_settings())
    # The pod's deadline covers every stage of every Package it runs.
    spec["activeDeadlineSeconds"] = sum(part.timeout_seconds for part in jobs)
    return pod_object(jobs, name, spec)


def pod_object(jobs: list[StageJob], name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A window's pod `name` with `spec`, in the stage pods' namespace, labelled and annotated after `jobs`."""
    meta = {"name": name, "namespace": PACKAGE_POD_NAMESPACE, "labels": labels(jobs[0]), "annotations": annotations(jobs)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def node_metadata(node: dict[str, Any], job: StageJob | list[StageJob], settings: StagePodSettings) -> dict[str, str]:
    """The ConfigMap entries of the node's metadata (pure): NodeWright's labels.json, annotations.json
    and packages.json (`agentVersion` and, per package recorded in the node's noderoll.io/state plus
    the ones this pod runs: name, version, image, stage, state)."""
    jobs = job if isinstance(job, list) else [job]
    meta = node.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    try:
        recorded = json.loads(annotations.get("noderoll.io/state", "{}")).get("packages", {})
    except (ValueError, AttributeError):
        recorded = {}
    packages = {
        pkg: {"name": pkg, **{k: entry.get(k) for k in ("version", "image", "stage", "state") if k in entry}}
        for pkg, entry in (recorded.items() if isinstance(recorded, dict) else ())
        if isinstance(entry, dict)
    }
    for part in jobs:
        current = {"name": part.package, "version": part.version, "image": part.image,
                   "agentImage": agent_image(part, settings)}
        packages[part.package] = {**packages.get(part.package, {}), **current}
    document = {"agentVersion": image_tag(agent_image(jobs[0], settings)), "packages": packages}
    return {
        METADATA_PREFIX + "labels.json": json.dumps(meta.get("labels") or {}, sort_keys=True),
        METADATA_PREFIX + "annotations.json": json.dumps(annotations, sort_keys=True),
        METADATA_PREFIX + "packages.json": json.dumps(document, sort_keys=True),
    }


def config_map_data(parts: list[StageJob]) -> dict[str, str]:
    """Every Package's config files under its keys in the pod's ConfigMap (pure; `_Part.config_key`)."""
    data: dict[str, str] = {}
    for index, part in enumerate(parts):
        for key, value in part.config.items():
            data[key if len(parts) <= 1 else f"p{index}.{key}"] = value
    return data
