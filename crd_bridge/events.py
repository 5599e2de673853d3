"""Kubernetes Events about Packages and DeploymentPolicies, for humans. Does I/O (Kubernetes).

Both kinds are cluster-scoped, so their Events live in namespace `default` (what client-go's
recorder does for cluster-scoped objects); `kubectl describe package/<name>` shows them.
Reasons are the constants below; a failed Event write is logged, never fatal (Events are advisory).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

import kube
from api import keys

log = logging.getLogger("noderoll.bridge.events")
COMPONENT = "noderoll-bridge"

NORMAL = "Normal"
WARNING = "Warning"
ROLLOUT_STARTED = "RolloutStarted"
SPEC_CHANGED = "SpecChanged"
PAUSED = "Paused"
RESUMED = "Resumed"
DELETING = "Deleting"
FINALIZER_REMOVED = "FinalizerRemoved"
INVALID_SPEC = "InvalidSpec"
DELETION_BLOCKED = "DeletionBlocked"
RECONCILE_FAILED = "ReconcileFailed"
# On a DeploymentPolicy: an analysis gate failed and halted its fleet (one Event per failure).
GATE_FAILED = "GateFailed"
# On a DeploymentPolicy: its fleet's failed canary was rolled back, or the rollback failed (once per outcome).
CANARY_ROLLED_BACK = "CanaryRolledBack"
# On a DeploymentPolicy of a promotion across clusters: `global/<policy>` halted every cluster (once per reason).
GLOBAL_HALTED = "GlobalHalted"


@dataclass(frozen=True)
class EventNote:
    """One Event: about `obj` (an API object dict of `kind`), of `type`, with `reason` and `message`."""

    kind: str
    obj: Mapping[str, Any]
    type: str
    reason: str
    message: str


def emit(note: EventNote) -> None:
    """Create the Event; errors are logged (an Event is never worth failing a reconcile)."""
    meta = note.obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    now = datetime.now(UTC)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=f"{name}.{uuid.uuid4().hex[:12]}", namespace=keys.EVENT_NAMESPACE),
        involved_object=client.V1ObjectReference(
            api_version=keys.API_VERSION,
            kind=note.kind,
            name=name,
            uid=meta.get("uid"),
            resource_version=meta.get("resourceVersion"),
        ),
        reason=note.reason,
        message=note.message[:1024],
        type=note.type,
        source=client.V1EventSource(component=COMPONENT),
        reporting_component=COMPONENT,
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
    try:
        client.CoreV1Api(kube.api_client()).create_namespaced_event(keys.EVENT_NAMESPACE, event)
    except ApiException as err:
        log.warning("event %s on %s/%s not written: HTTP %s", note.reason, note.kind, name, err.status)
