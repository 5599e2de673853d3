"""Snapshot of the fleet's Nodes for target selection. Does I/O (Kubernetes API, read only).

`list_target_nodes` lists Nodes (paged, `kube.nodes.list_node_facts`) and returns, per node, only what target selection and
batch planning read: name, labels, taints, creation time, the raw `noderoll.io/state`
annotation (reduced to the package's entry and those of its dependencies; kept whole when it
cannot be read, so the rollout holds the node as its node workflow would), the `noderoll.io/status`
label and whether `noderoll.io/StateMalformed` is True (what `planning.node_marks` compares with).
The decision (selector, ignore label, taints, done nodes) is pure: `planning.targets.select_targets`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from temporalio import activity

from activities.io import ListTargetNodesInput, ListTargetNodesResult, NodeSnapshot
from api.node_state import parse_node_state
from kube.node_snapshot import NodeFacts
from kube.nodes import list_node_facts


def _only_packages(raw: str, packages: Sequence[str]) -> str:
    """The state annotation reduced to the entries of `packages`; an unreadable one is kept as it is.

    Unreadable means anywhere, not only in these entries: the node workflow reads the whole
    annotation and holds the node, so the rollout must see the same garbage.
    """
    if parse_node_state(raw)[1] is not None:
        return raw
    try:
        data = json.loads(raw)
        entries = {p: data["packages"].get(p) for p in packages}
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw
    return json.dumps({"packages": {p: e for p, e in entries.items() if e is not None}}, sort_keys=True)


def target_snapshot(facts: NodeFacts, package: str = "", also: Sequence[str] = ()) -> NodeSnapshot:
    """What target selection needs of a Node (the state annotation reduced to `package` and `also`
    when a package is given). Pure."""
    raw = facts.state_annotation
    return NodeSnapshot(
        name=facts.name,
        labels=facts.labels,
        taints=facts.taints,
        created=facts.created,
        state_annotation=_only_packages(raw, [package, *also]) if package and raw else raw,
        status_label=facts.status_label,
        state_malformed=facts.state_malformed,
    )


@activity.defn(name="list_target_nodes")
def list_target_nodes(input: ListTargetNodesInput) -> ListTargetNodesResult:
    """Every Node (narrowed by `input.label_selector` when given), sorted by name."""
    nodes = list_node_facts(input.label_selector, activity.heartbeat)
    return ListTargetNodesResult(nodes=[target_snapshot(n, input.package, input.also) for n in nodes])
