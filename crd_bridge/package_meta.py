"""Metadata writes on Packages and DeploymentPolicies: finalizers. Does I/O (Kubernetes).

The uninstall finalizer (`noderoll.io/uninstall`, Packages) and the deletion-protection finalizer
(`noderoll.io/in-use`, both kinds: `crd_bridge.protection`).

Finalizer edits are JSON patches guarded by a `test` of the resourceVersion, so another
controller's finalizer added at the same time is never lost (a merge patch would replace the whole
list); on a conflict the object is read again. The write does not touch `spec`, so it does not bump
`metadata.generation`.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

import kube
from api import keys

CONFLICT_RETRIES = 5
JSON_PATCH = "application/json-patch+json"


def _api() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube.api_client())


def set_finalizer(name: str, present: bool, finalizer: str = keys.FINALIZER, plural: str = keys.PACKAGE_PLURAL) -> bool:
    """Add (`present`) or remove `finalizer` on object `name` of `plural`; True when it changed."""
    api = _api()
    what = f"{plural}/{name}"
    for _ in range(CONFLICT_RETRIES):
        try:
            obj: dict[str, Any] = api.get_cluster_custom_object(keys.GROUP, keys.VERSION, plural, name)
        except ApiException as err:
            if kube.is_not_found(err):
                return False
            raise RuntimeError(f"read {what}: HTTP {err.status} {err.reason}") from err
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if (finalizer in finalizers) == present:
            return False
        if present and meta.get("deletionTimestamp"):
            return False  # the API refuses new finalizers on an object being deleted
        new = [*finalizers, finalizer] if present else [f for f in finalizers if f != finalizer]
        body = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
            {"op": "replace" if "finalizers" in meta else "add", "path": "/metadata/finalizers", "value": new},
        ]
        try:
            api.patch_cluster_custom_object(keys.GROUP, keys.VERSION, plural, name, body, _content_type=JSON_PATCH)
            return True
        except ApiException as err:
            if kube.is_not_found(err):
                return False
            # 409 or a failed `test` (422): the object changed in between; read it again.
            if err.status in (409, 422):
                continue
            raise RuntimeError(f"patch finalizers of {what}: HTTP {err.status} {err.reason}") from err
    raise RuntimeError(f"finalizers of {what}: too many concurrent changes")
