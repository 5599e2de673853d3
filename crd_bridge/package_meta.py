"""Metadata writes on Packages: the uninstall finalizer. Does I/O (Kubernetes).

Finalizer edits are JSON patches guarded by a `test` of the resourceVersion, so another
controller's finalizer added at the same time is never lost (a merge patch would replace the whole
list); on a conflict the object is read again. The write does not touch `spec`, so it does not bump
`metadata.generation`.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities import kube
from api import keys

CONFLICT_RETRIES = 5
JSON_PATCH = "application/json-patch+json"


def _api() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube.api_client())


def set_finalizer(name: str, present: bool) -> bool:
    """Add (`present`) or remove `noderoll.io/uninstall` on Package `name`; True when it changed."""
    api = _api()
    for _ in range(CONFLICT_RETRIES):
        try:
            obj: dict[str, Any] = api.get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name)
        except ApiException as err:
            if kube.is_not_found(err):
                return False
            raise RuntimeError(f"read Package {name}: HTTP {err.status} {err.reason}") from err
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if (keys.FINALIZER in finalizers) == present:
            return False
        new = [*finalizers, keys.FINALIZER] if present else [f for f in finalizers if f != keys.FINALIZER]
        body = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
            {"op": "replace" if "finalizers" in meta else "add", "path": "/metadata/finalizers", "value": new},
        ]
        try:
            api.patch_cluster_custom_object(
                keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name, body, _content_type=JSON_PATCH
            )
            return True
        except ApiException as err:
            if kube.is_not_found(err):
                return False
            # 409 or a failed `test` (422): the object changed in between; read it again.
            if err.status in (409, 422):
                continue
            raise RuntimeError(f"patch finalizers of Package {name}: HTTP {err.status} {err.reason}") from err
    raise RuntimeError(f"finalizers of Package {name}: too many concurrent changes")
