"""Node reads, the paged Node listing, the guarded read-build-patch of a Node, and the one classification
of a missing Node (`NodeNotFound`). Does I/O.

Every activity that reads or writes a Node answers a 404 the same way: the non-retryable
`protocol.errors.NODE_NOT_FOUND`, which ends a node window at once (workflows/node_window.py).
`patch_node_with_retry` writes a merge patch carrying the resourceVersion it was built from: a
concurrent edit by someone else makes the apiserver answer 409, and the Node is read and the patch
built again instead of overwriting blindly.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError

import kube
from kube.node_snapshot import NodeFacts, node_facts
from protocol import errors

PAGE_SIZE = 500
CONFLICT_RETRIES = 8


def node_not_found(name: str, what: str = "does not exist") -> ApplicationError:
    """The non-retryable failure for a Node that is gone: `node <name> <what>`."""
    return errors.fatal(f"node {name} {what}", errors.NODE_NOT_FOUND)


def find_node(name: str) -> client.V1Node | None:
    """Read the Node; None when it does not exist (for callers to whom a missing node is no failure),
    other errors classified."""
    try:
        return kube.core().read_node(name)
    except ApiException as err:
        if kube.is_not_found(err):
            return None
        kube.raise_for(err, f"read node {name}")


def read_node(name: str, missing: str = "does not exist") -> client.V1Node:
    """Read the Node; a missing one raises `node_not_found(name, missing)`, other errors are classified."""
    node = find_node(name)
    if node is None:
        raise node_not_found(name, missing)
    return node


def patch_node_with_retry(name: str, build: Callable[[client.V1Node], dict[str, Any] | None],
                          seen: client.V1Node | None = None) -> client.V1Node:
    """Read the node, build a merge patch from it (None: nothing to do), apply it with its resourceVersion.

    `seen`: the node as the caller read it (its resourceVersion set): the first try builds from it
    instead of reading. A 409 (someone else wrote the node in between) re-reads and rebuilds, up to
    CONFLICT_RETRIES.
    """
    for attempt in range(CONFLICT_RETRIES):
        node = seen if attempt == 0 and seen is not None else read_node(name)
        patch = build(node)
        if patch is None:
            return node
        patch.setdefault("metadata", {})["resourceVersion"] = node.metadata.resource_version
        try:
            return kube.core().patch_node(name, patch, _content_type="application/merge-patch+json")
        except ApiException as err:
            if kube.is_conflict(err):
                continue
            if kube.is_not_found(err):
                raise node_not_found(name) from err
            kube.raise_for(err, f"patch node {name}")
    raise RuntimeError(f"patch node {name}: still conflicting after {CONFLICT_RETRIES} attempts")


def read_node_json(name: str, missing: str = "does not exist") -> dict[str, Any]:
    """`read_node` as raw JSON, for a caller that reads a few fields (the stage pod's node metadata):
    not built into the client's model objects (`kube.untyped`, ADR 0019)."""
    try:
        return kube.untyped(kube.core().read_node, name)
    except ApiException as err:
        if kube.is_not_found(err):
            raise node_not_found(name, missing) from err
        kube.raise_for(err, f"read node {name}")


def list_node_facts(label_selector: str = "", on_page: Callable[[int], None] | None = None,
                    field_selector: str = "") -> list[NodeFacts]:
    """Every Node (narrowed by `label_selector` and `field_selector` when given) as `NodeFacts`, sorted by name,
    listed in pages from etcd, so every write completed before the call shows; `on_page(count so far)` after
    each page (the activities heartbeat there)."""
    nodes: list[NodeFacts] = []
    token: str | None = None
    while True:
        # A quorum read (etcd; the continue token keeps every page at the first page's revision), not
        # the watch cache: the listing must show every node state the fleet's windows have written
        # before it (an uninstall wave listed from a lagging cache once took a node whose install it
        # did not see yet for uninstalled). One listing per batch, not per window
        # (docs/architecture.md, "Reads").
        # Raw JSON (`node_facts` reads it as is): typed, each page's 500 nodes were built into the
        # client's models and taken apart again, a cost paid on every listing of a large fleet.
        try:
            page = kube.untyped(kube.core().list_node, label_selector=label_selector or None,
                                field_selector=field_selector or None, limit=PAGE_SIZE, _continue=token)
        except ApiException as err:
            kube.raise_for(err, "list nodes")
        nodes.extend(node_facts(n) for n in page.get("items") or [])
        if on_page is not None:
            on_page(len(nodes))
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            break
    return sorted(nodes, key=lambda n: n.name)


def read_node_facts(names: Collection[str], on_node: Callable[[int], None] | None = None) -> list[NodeFacts]:
    """The named Nodes as `NodeFacts` (one read each, from etcd; a Node that does not exist is left out),
    sorted by name; `on_node(count so far)` after each (the activities heartbeat there)."""
    found: list[NodeFacts] = []
    for count, name in enumerate(sorted(set(names)), 1):
        try:
            found.append(node_facts(kube.untyped(kube.core().read_node, name)))
        except ApiException as err:
            if not kube.is_not_found(err):
                kube.raise_for(err, f"read node {name}")
        if on_node is not None:
            on_node(count)
    return found
