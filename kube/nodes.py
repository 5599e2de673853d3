"""Node reads and the one classification of a missing Node (`NodeNotFound`). Does I/O.

Every activity that reads or writes a Node answers a 404 the same way: the non-retryable
`protocol.errors.NODE_NOT_FOUND`, which ends a node window at once (workflows/node_window.py).
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError

import kube
from protocol import errors


def node_not_found(name: str, what: str = "does not exist") -> ApplicationError:
    """The non-retryable failure for a Node that is gone: `node <name> <what>`."""
    return errors.fatal(f"node {name} {what}", errors.NODE_NOT_FOUND)


def read_node(name: str, missing: str = "does not exist") -> client.V1Node:
    """Read the Node; a missing one raises `node_not_found(name, missing)`, other errors are classified."""
    try:
        return kube.core().read_node(name)
    except ApiException as err:
        if kube.is_not_found(err):
            raise node_not_found(name, missing) from err
        kube.raise_for(err, f"read node {name}")
