"""Refuse to start beside a process of another cluster that drives the same ids. Does I/O (Temporal, Kubernetes).

Several clusters may share one Temporal namespace when each worker and bridge has its own cluster
name (`--cluster`): their ids (`fleet/<cluster>/<policy>`, `node/<cluster>/<node>`) and task queues
(`noderoll-<cluster>`) never meet (ADR 0017). Two processes of different clusters on the same task
queue would: one cluster's bridge would start fleets that the other cluster's worker runs against
the other cluster's nodes, and two clusters without a name share `fleet/<policy>` and
`node/<node>` outright (the collision of issue 29). So `noderoll worker` and `noderoll bridge` look,
before they start, at who else drives their task queue, and refuse to start, naming it, when
* a noderoll worker polling the task queue (its Temporal identity, `protocol.version`: `;cluster=`
  and `;kube=`) has another cluster name, or none when this process has one, or the other way round;
* or it has the same cluster name (or none) but runs against another Kubernetes cluster (its
  `kube-system` namespace uid differs from this process's: two clusters given the same name, or
  two clusters without one);
* or a fleet or node workflow running on the task queue has an id of another cluster
  (`protocol.names.id_cluster`).
Pollers that stopped within the last minutes still count (Temporal keeps them listed for a while):
a worker restarted with another cluster name waits for that, or uses another task queue.
The decision (`conflicts`, `refusal`) is pure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kubernetes.client import ApiException
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

import kube
from protocol import names
from protocol.version import identity_fields

log = logging.getLogger("noderoll.service")
# Workflows of other clusters named in the refusal (the rest are counted).
SHOWN = 5
KUBE_SYSTEM = "kube-system"


@dataclass(frozen=True)
class Identity:
    """Who a process is: its cluster name ("" = none) and its Kubernetes cluster's uid ("" = unknown)."""

    cluster: str
    kube: str


def kube_cluster_uid() -> str:
    """The uid of this Kubernetes cluster's `kube-system` namespace ("" when it cannot be read)."""
    try:
        namespace = kube.core().read_namespace(KUBE_SYSTEM)
    except ApiException:
        return ""  # no RBAC for it, or no such namespace: the name alone is compared
    except Exception as err:  # noqa: BLE001 - an apiserver down at start must not stop the process
        log.warning("which Kubernetes cluster this is stays unknown (%s): only cluster names are compared", err)
        return ""
    return str(namespace.metadata.uid or "")


def _named(cluster: str) -> str:
    return f"cluster name {cluster!r}" if cluster else "no cluster name"


def conflicts(me: Identity, pollers: list[str], running: list[str]) -> list[str]:
    """What drives this process's task queue for another cluster (pure; module docstring).

    `pollers`: identities polling the task queue; `running`: ids of fleet and node workflows open on it."""
    found = []
    for identity in sorted(set(pollers)):
        fields = identity_fields(identity)
        if fields is None:
            continue
        cluster, other_kube = fields.get("cluster", ""), fields.get("kube", "")
        if cluster != me.cluster:
            found.append(f"worker {identity} has {_named(cluster)} (this process: {_named(me.cluster)})")
        elif me.kube and other_kube and other_kube != me.kube:
            found.append(f"worker {identity} has {_named(cluster)} too but runs against another Kubernetes "
                         f"cluster (kube-system uid {other_kube}, this one {me.kube})")
    foreign = sorted(i for i in running if names.id_cluster(i) not in (None, me.cluster))
    if foreign:
        more = f" and {len(foreign) - SHOWN} more" if len(foreign) > SHOWN else ""
        found.append(f"workflows of another cluster run on it: {', '.join(foreign[:SHOWN])}{more}")
    return found


def refusal(process: str, namespace: str, task_queue: str, found: list[str]) -> str:
    """Why `process` does not start (pure)."""
    return (f"noderoll {process}: refusing to start: task queue {task_queue!r} in Temporal namespace "
            f"{namespace!r} is driven for another cluster: {'; '.join(found)}. Give every cluster's worker and "
            "bridge its own --cluster NAME (task queue noderoll-<NAME>; docs/multi-cluster.md), or stop the "
            "other process.")


async def task_queue_pollers(client: Client, task_queue: str) -> list[str]:
    """Identities of every workflow and activity poller of `task_queue` seen lately."""
    found: list[str] = []
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        request = DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
                                           task_queue_type=kind)
        answer = await client.workflow_service.describe_task_queue(request)
        found.extend(p.identity for p in answer.pollers)
    return found


async def running_ids(client: Client, task_queue: str) -> list[str]:
    """Ids of fleet and node workflows open on `task_queue` (one page is enough to name a few)."""
    query = (f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running' AND "
             f"(WorkflowType = '{names.FLEET_WORKFLOW_TYPE}' OR WorkflowType = '{names.NODE_WORKFLOW_TYPE}')")
    return [e.id async for e in client.list_workflows(query, limit=200)]


async def refuse_other_clusters(client: Client, process: str, task_queue: str, me: Identity) -> None:
    """Raise SystemExit with `refusal` when another cluster drives `task_queue` (module docstring)."""
    found = conflicts(me, await task_queue_pollers(client, task_queue), await running_ids(client, task_queue))
    if found:
        raise SystemExit(refusal(process, client.namespace, task_queue, found))
