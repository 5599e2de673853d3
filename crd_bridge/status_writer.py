"""The one writer of the status subresource of Packages and DeploymentPolicies. Does I/O (Kubernetes).

Every status write of the bridge goes through `write_status`: a JSON merge patch of `status`,
sent only when the rendered status differs from the one on the object (so a resync every few
seconds costs no writes), with keys that disappeared set to null so nothing stale stays behind.
A Package that is gone (404) is not an error: there is nothing left to report on.
Empty strings are left out of the written status: the local 1.20 apiserver stores "" in a custom
resource as null and then rejects it against the schema (HTTP 422), and an absent optional field
reads the same to every client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

import kube
from api import keys

log = logging.getLogger("noderoll.bridge.status")


@dataclass(frozen=True)
class StatusWrite:
    """Write `status` on object `name` of `kind` (Package or DeploymentPolicy) whose status is `current`."""

    kind: str
    name: str
    status: Mapping[str, Any]
    current: Mapping[str, Any] | None = None


def without_empty_strings(value: Any) -> Any:
    """`value` with every "" dropped from mappings (lists keep their length). Pure."""
    if isinstance(value, Mapping):
        return {k: without_empty_strings(v) for k, v in value.items() if v != ""}
    if isinstance(value, list):
        return [without_empty_strings(v) for v in value]
    return value


def status_patch(current: Mapping[str, Any] | None, status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch from `current` to `status` (removed keys set to null), or None when equal. Pure."""
    before = dict(current or {})
    status = without_empty_strings(status)
    if before == dict(status):
        return None
    patch: dict[str, Any] = {key: None for key in before if key not in status}
    patch.update(status)
    return patch


def write_status(write: StatusWrite) -> bool:
    """Patch the status subresource when it changed; True when a write happened."""
    patch = status_patch(write.current, write.status)
    if patch is None:
        return False
    plural = keys.PACKAGE_PLURAL if write.kind == keys.PACKAGE_KIND else keys.POLICY_PLURAL
    api = client.CustomObjectsApi(kube.api_client())
    try:
        api.patch_cluster_custom_object_status(keys.GROUP, keys.VERSION, plural, write.name, {"status": patch})
    except ApiException as err:
        if kube.is_not_found(err):
            log.info("%s/%s is gone; status not written", write.kind, write.name)
            return False
        raise RuntimeError(f"write status of {write.kind}/{write.name}: HTTP {err.status} {err.reason}") from err
    return True
