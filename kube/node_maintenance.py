"""NodeMaintenance objects of NVIDIA's maintenance-operator (`maintenance.nvidia.com/v1alpha1`,
namespaced, `spec.nodeName`, `spec.requestorID`): the nodes another requestor holds. Does I/O.

Read by the fleet's node listing when its policy respects them (`spec.respect.nodeMaintenance`,
api/respect.py): one list across every namespace (paged). A cluster without the CRD answers 404:
remembered for `ABSENT_RECHECK_SECONDS` by this process, so a fleet's listings do not ask again each
time, and nothing is logged (most clusters do not run the operator). A 403 (a worker whose RBAC
lacks the rule the Helm chart grants) is logged as a warning and handled the same way: the listing
goes on without them (untested: the tests' clients may do everything). An object whose `requestorID`
is noderoll's own (`NODEROLL_REQUESTOR`) is not another's maintenance (noderoll creates none today).
Every other object counts, whatever its phase and also while it is being deleted: its operator holds
the node until its finalizer is gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

import kube

log = logging.getLogger(__name__)
GROUP = "maintenance.nvidia.com"
VERSION = "v1alpha1"
PLURAL = "nodemaintenances"
NODEROLL_REQUESTOR = "noderoll.io"
ABSENT_RECHECK_SECONDS = 300.0
FORBIDDEN = 403
PAGE_SIZE = 500


def held_nodes_of(items: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node -> `<namespace>/<name> (requestor <id>)` of the first NodeMaintenance (by namespace/name) of
    another requestor naming it (pure)."""
    held: dict[str, str] = {}
    described = []
    for item in items:
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        node, requestor = str(spec.get("nodeName") or ""), str(spec.get("requestorID") or "")
        if not node or requestor == NODEROLL_REQUESTOR:
            continue
        where = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        described.append((where, node, f"{where} (requestor {requestor or 'unknown'})"))
    for _where, node, text in sorted(described):
        held.setdefault(node, text)
    return held


class _Absence:
    """When this process last found the CRD missing (monotonic seconds; None: not missing)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.lock = threading.Lock()

    def known(self, now: float) -> bool:
        with self.lock:
            return self.since is not None and now - self.since < ABSENT_RECHECK_SECONDS

    def mark(self, now: float | None) -> None:
        with self.lock:
            self.since = now


_ABSENT = _Absence()


def held_nodes(clock: Callable[[], float] = time.monotonic) -> dict[str, str]:
    """Every node a NodeMaintenance of another requestor names ({} without the CRD; module docstring)."""
    now = clock()
    if _ABSENT.known(now):
        return {}
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        try:
            page = kube.untyped(kube.custom().list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                limit=PAGE_SIZE, _continue=token)
        except ApiException as err:
            if kube.is_not_found(err):
                _ABSENT.mark(now)  # no CRD (or not served): quietly nothing, asked again later
                return {}
            if err.status == FORBIDDEN:
                # The worker's RBAC predates the rule (Helm grants it): said, then handled as no CRD.
                log.warning("cannot list %s.%s (HTTP 403: grant the worker list on them): NodeMaintenance "
                            "objects are not respected; asked again in %.0f s", PLURAL, GROUP, ABSENT_RECHECK_SECONDS)
                _ABSENT.mark(now)
                return {}
            kube.raise_for(err, f"list {PLURAL}.{GROUP}")
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            break
    _ABSENT.mark(None)
    return held_nodes_of(items)
