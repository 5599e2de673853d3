"""noderoll's version, and where each process publishes it (`noderoll version`). Reads package metadata only.

* the client: the installed distribution's version (`importlib.metadata`, from pyproject.toml);
* `noderoll worker`: its Temporal worker identity, `noderoll-worker/<version>@<host>:<pid>`, which
  Temporal shows for every poller of the task queue (`DescribeTaskQueue`, the Temporal UI's
  "Workers" tab), so the version of every running worker is known without reaching the worker;
  followed by `;cluster=<name>` when it has a cluster name and `;kube=<uid>` (its Kubernetes
  cluster's `kube-system` namespace uid) when it could read it: what `service/cluster_guard.py`
  compares to refuse to start beside a process of another cluster (ADR 0017);
* `noderoll bridge`: the annotation `noderoll.io/version` on its leader-election Lease, written by
  the replica that holds it with every renewal (a bridge running without leader election
  publishes nothing).
"""

from __future__ import annotations

import os
import socket
from importlib import metadata

DISTRIBUTION = "noderoll"
WORKER_IDENTITY_PREFIX = "noderoll-worker/"


def noderoll_version() -> str:
    """The installed noderoll version ("unknown" when run from a tree that is not installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def worker_identity(cluster: str = "", kube: str = "") -> str:
    """This worker's Temporal identity: `noderoll-worker/<version>@<host>:<pid>[;cluster=<name>][;kube=<uid>]`."""
    fields = (f";cluster={cluster}" if cluster else "") + (f";kube={kube}" if kube else "")
    return f"{WORKER_IDENTITY_PREFIX}{noderoll_version()}@{socket.gethostname()}:{os.getpid()}{fields}"


def identity_fields(identity: str) -> dict[str, str] | None:
    """The `;key=value` fields of a worker identity written by `worker_identity` (`cluster`, `kube`;
    absent: none or unknown); None for identities that are not a noderoll worker's. Pure."""
    if not identity.startswith(WORKER_IDENTITY_PREFIX):
        return None
    fields = {}
    for part in identity.split(";")[1:]:
        key, _, value = part.partition("=")
        fields[key] = value
    return fields


def identity_version(identity: str) -> str | None:
    """The version in a worker identity written by `worker_identity`; None for other identities. Pure."""
    if not identity.startswith(WORKER_IDENTITY_PREFIX):
        return None
    return identity.removeprefix(WORKER_IDENTITY_PREFIX).split("@", 1)[0] or None
