"""The names of a stage pod's containers and the Package and mode each one runs. Pure.

A stage pod of one Package names its agent containers after their modes (`apply`, `apply-check`)
and its copy container `package`, as NodeWright does. A pod of several Packages (one pod per window
phase, ADR 0016) prefixes each container with its Package's index, `p<i>-<mode>` and `p<i>-package`,
and lists its Packages in the annotation `noderoll.io/packages` (JSON, in the order they run). Modes
are at most 20 characters, so a name stays a DNS label well under 63 characters whatever the
Package's name (up to 43), and `kubectl logs <pod> -c p1-config-check` stays readable.

Used by the manifest (`activities/stage_pod.py`), the pod wait (`kube/pod_wait.py`), the outcome's
attribution (`activities/stage_run.py`), `noderoll logs` (`cli/ops_client.py`) and fleetsim.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from api.keys import STAGE_PACKAGE_CONTAINER, STAGE_PACKAGE_LABEL, STAGE_PACKAGES_ANNOTATION

_PREFIXED = re.compile(r"^p(\d+)-(.+)$")


def container_name(index: int, count: int, mode: str) -> str:
    """The container of `mode` for the `index`-th of `count` Packages (the mode alone for one)."""
    return mode if count <= 1 else f"p{index}-{mode}"


def copy_container_name(index: int, count: int) -> str:
    """The init container copying the `index`-th Package's folder out of its image."""
    return container_name(index, count, STAGE_PACKAGE_CONTAINER)


def pod_packages(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> list[str]:
    """The Packages a stage pod (or its Job, before ADR 0018) runs, in order: its annotation, else its package label."""
    raw = (annotations or {}).get(STAGE_PACKAGES_ANNOTATION, "")
    if raw:
        try:
            names = json.loads(raw)
        except ValueError:
            names = None
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            return list(names)
    package = (labels or {}).get(STAGE_PACKAGE_LABEL, "")
    return [package] if package else []


def split_container(name: str, packages: list[str]) -> tuple[str, str]:
    """(Package, mode) of a container of a pod running `packages`; the Package is "" when the
    name does not map to one (a prefix out of range)."""
    if len(packages) > 1:
        match = _PREFIXED.match(name)
        if match is None:
            return "", name
        index = int(match.group(1))
        return (packages[index] if index < len(packages) else ""), match.group(2)
    return (packages[0] if packages else ""), name


def is_copy(name: str) -> bool:
    """True for a copy container (`package`, `p<i>-package`): no mode of its own."""
    if name == STAGE_PACKAGE_CONTAINER:
        return True
    match = _PREFIXED.match(name)
    return match is not None and match.group(2) == STAGE_PACKAGE_CONTAINER
