"""Which Node changes concern which rollouts, and the inputs of the runtime-required taint rule. Pure.

A rollout re-lists its nodes every few minutes on its own; the bridge makes joins and relabels
visible at once by signalling `nodes_changed` to the rollouts whose selector matches the node before
or after the change. Only changes a rollout's target selection depends on count: a new node, its
labels (but `noderoll.io/status`, which noderoll itself writes with every node state write and
every blocked mark, drain-ahead's `noderoll.io/upcoming`, which fleets write before windows, and
`noderoll.io/skipped`, which a window that gave its node up writes),
its taints (an untolerated taint blocks a node; its removal unblocks it; not the cordon taint nor
drain-ahead's PreferNoSchedule `noderoll.io/upcoming`), the
state annotation becoming unreadable or readable again (an unreadable one holds the node), and,
for a Package with `dependsOn`, a change of a dependency's record in the node's state annotation
(the rollout holds a node back until its dependency is complete there), and a package's record
disappearing (a reset, `noderoll node reset`: the fleet asks the node again). Status heartbeats
and other state-annotation changes do not.

A fleet with a capacity floor must also hear at once when a node's availability changes by someone
else's hand, not at its next re-list (issue 43): `availability_change` is a cordon or uncordon that
is not noderoll's own (noderoll's cordon and uncordon set and clear `noderoll.io/cordoned-by` in the
same patch; a cordon that leaves the annotation as it was is someone else's), or a node turning
NotReady or Ready outside noderoll's own window (a node labelled `noderoll.io/status=in-progress`
is in a window: its reboot's NotReady is noderoll's), or a taint set or lifted that another
maintenance may hold the node with (`spec.respect`; any key but the kubelet's `node.kubernetes.io/*`
and noderoll's own `noderoll.io/*`: a fleet's hand-out reads only the nodes named to it and
those the apiserver selects as cordoned or in a window, issue 45). It goes, as `availability_changed`, to the
fleets one of whose Packages targets the node (`fleets_targeting`: the same selector match as for
`nodes_changed`, and the fleets uninstalling a deleted Package there).

The runtime-required taint rule itself is `planning.node.runtime_taint`; here a Node object (API JSON)
and the bridge's valid Packages are turned into its input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from api import keys
from api.enums import NodeStatus
from api.node_state import parse_node_state
from api.package import Package, PackageSpec
from kube.node_snapshot import NodeFacts, node_facts
from kube.node_snapshot import node_view as as_view
from planning.node.runtime_taint import RuntimePackage, RuntimeTaintInput
from planning.node.targets import UNSCHEDULABLE_TAINT_KEY, NodeView, is_candidate
from protocol.fleet import FleetSpec, NodeReset
from protocol.names import fleet_name

# The kubelet's and the node lifecycle controller's taints (not-ready, unreachable, pressure...).
NODE_LIFECYCLE_TAINT_PREFIX = "node.kubernetes.io/"
# noderoll's own taints (drain-ahead's mark, the runtime-required taint the bridge sets itself).
NODEROLL_TAINT_PREFIX = "noderoll.io/"


def node_view(obj: Mapping[str, Any]) -> NodeView:
    """The parts of a Node object (API JSON) that target selection reads (`kube.node_snapshot`)."""
    return as_view(node_facts(obj))


def targeting_change(old: NodeView | None, new: NodeView) -> bool:
    """True when the change from `old` (None: a new node) may change some rollout's targets."""
    if old is None:
        return True
    return (
        _selectable_labels(old) != _selectable_labels(new)
        or _taint_set(old) != _taint_set(new)
        or (old.state_annotation != new.state_annotation and _readable(old) != _readable(new))
    )


def _selectable_labels(node: NodeView) -> dict[str, str]:
    # noderoll's own status label is no selector input: counting it made every state write a signal.
    # Drain-ahead's mark likewise (each batch's marks would signal every fleet of the node).
    # A skipped window's label likewise (planning/rollout/fleet_state.py asks a skipped node again on `retry` only).
    return {k: v for k, v in node.labels.items()
            if k not in (keys.NODE_STATUS_LABEL, keys.UPCOMING_KEY, keys.SKIPPED_LABEL)}


def _readable(node: NodeView) -> bool:
    return parse_node_state(node.state_annotation)[1] is None


def _taint_set(node: NodeView) -> set[tuple[str, str, str]]:
    # The cordon taint is tolerated by target selection and toggles on every node window: counting
    # it made each cordon and uncordon a `nodes_changed` signal (hundreds per rollout, most of its history).
    return _taints(node.taints, lambda key: key in (UNSCHEDULABLE_TAINT_KEY, keys.UPCOMING_KEY))


def _taints(taints: Iterable[Mapping[str, str]], skipped: Callable[[str], bool]) -> set[tuple[str, str, str]]:
    """(key, value, effect) of each taint whose key is not `skipped`."""
    return {(t.get("key", ""), t.get("value", ""), t.get("effect", "")) for t in taints if not skipped(t.get("key", ""))}


def changed_records(old: NodeView | None, new: NodeView) -> set[str]:
    """Packages whose entry in the node's state annotation differs between `old` and `new`."""
    if old is None or old.state_annotation == new.state_annotation:
        return set()
    before = parse_node_state(old.state_annotation)[0].packages
    after = parse_node_state(new.state_annotation)[0].packages
    return {name for name in set(before) | set(after) if before.get(name) != after.get(name)}


def forgotten_records(old: NodeView | None, new: NodeView) -> set[str]:
    """Packages recorded in `old`'s readable state annotation and absent from `new`'s (a reset, an uninstall)."""
    if old is None or old.state_annotation == new.state_annotation:
        return set()
    before, problem = parse_node_state(old.state_annotation)
    after, unreadable = parse_node_state(new.state_annotation)
    if problem is not None or unreadable is not None:
        return set()  # readability changes are a targeting change of their own
    return set(before.packages) - set(after.packages)


def availability_change(old: NodeFacts | None, new: NodeFacts) -> bool:
    """True when the change from `old` to `new` is a cordon, an uncordon or a Ready flip by someone
    else's hand, or a change of the taints another maintenance may set (module docstring); a new node is
    `nodes_changed`'s, not this."""
    if old is None:
        return False
    ours = old.cordoned_by != new.cordoned_by and keys.CORDONED_BY_VALUE in (old.cordoned_by, new.cordoned_by)
    cordon = old.unschedulable != new.unschedulable and not ours
    in_window = NodeStatus.IN_PROGRESS.value in (old.status_label, new.status_label)
    return cordon or (old.ready != new.ready and not in_window) or _maintenance_taints(old) != _maintenance_taints(new)


def _maintenance_taints(node: NodeFacts) -> set[tuple[str, str, str]]:
    # Taints another maintenance may set (a respected one holds the node, `planning.rollout.respect`): a
    # fleet's hand-out reads only the nodes it names or the apiserver selects (cordoned, in a window), and a
    # taint cannot be selected, so the bridge names the node (issue 45). Not the kubelet's and node
    # controller's `node.kubernetes.io/*` (they follow Ready, noted above, and every window's reboot sets
    # them), nor noderoll's own (drain-ahead's `noderoll.io/upcoming`, the runtime-required taint).
    return _taints(node.taints, lambda key: key.startswith((NODE_LIFECYCLE_TAINT_PREFIX, NODEROLL_TAINT_PREFIX)))


def fleets_targeting(views: Iterable[NodeView], packages: Mapping[str, PackageSpec],
                     sent: Mapping[str, FleetSpec]) -> set[str]:
    """The fleets one of whose Packages targets one of `views` (the node before and after a change):
    a valid Package's selector, or an uninstall a fleet carries."""
    seen = list(views)
    fleets = {fleet_name(spec.deployment_policy) for spec in packages.values()
              if any(is_candidate(spec, view.labels) for view in seen)}
    return fleets | set(_uninstalling(seen, sent))


def _uninstalling(views: Sequence[NodeView], sent: Mapping[str, FleetSpec]) -> list[str]:
    return sorted(
        fleet
        for fleet, spec in sent.items()
        if any(entry.uninstall and any(is_candidate(PackageSpec.model_validate(entry.spec), view.labels)
                                       for view in views)
               for entry in spec.packages)
    )


def fleets_uninstalling_on(old: NodeView | None, new: NodeView, sent: Mapping[str, FleetSpec]) -> list[str]:
    """Fleets carrying a deleted Package's uninstall whose selector matches the node before or after a
    change that may change targets (sorted).

    A deleted Package is no longer among the valid ones `packages_to_notify` is given, but its fleet
    still has nodes to uninstall it from: one its uninstall wave found blocked (a node's own reboot
    leaves the not-ready taint for seconds) must be heard of when the taint lifts, not at the fleet's
    periodic re-list minutes later.
    """
    if not targeting_change(old, new):
        return []
    return _uninstalling((new,) if old is None else (old, new), sent)


def packages_to_notify(
    old: NodeView | None, new: NodeView, packages: Mapping[str, PackageSpec]
) -> list[str]:
    """Packages whose selector matches the node before or after a change that concerns them (sorted)."""
    targeting = targeting_change(old, new)
    dependents = [s for s in packages.values() if s.depends_on]
    records = changed_records(old, new) if dependents and not targeting else set()
    forgotten = forgotten_records(old, new) if not targeting else set()
    if not targeting and not records and not forgotten:
        return []
    views: Iterable[NodeView] = (new,) if old is None else (old, new)
    return sorted(
        name
        for name, spec in packages.items()
        if (targeting or records.intersection(spec.depends_on) or name in forgotten)
        and any(is_candidate(spec, view.labels) for view in views)
    )


def reset_from_annotation(obj: Mapping[str, Any]) -> NodeReset | None:
    """The reset a Node object's `noderoll.io/reset` annotation (`<id>[:<package>,...]`) asks for, if any."""
    value = str(((obj.get("metadata") or {}).get("annotations") or {}).get(keys.RESET_ANNOTATION) or "").strip()
    if not value:
        return None
    reset_id, _, listed = value.partition(":")
    packages = sorted({p.strip() for p in listed.split(",") if p.strip()})
    return NodeReset(id=f"annotation:{reset_id.strip()}", packages=packages,
                     source=f"annotation {keys.RESET_ANNOTATION}")


def parse_time(text: str | None) -> datetime | None:
    """An API timestamp (RFC 3339, e.g. `2024-07-01T12:00:00Z`) as an aware datetime; None when absent or bad."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def runtime_package(package: Package) -> RuntimePackage:
    """A Package model as the runtime-required taint rule sees it."""
    return RuntimePackage(package.name, package.spec, parse_time(package.metadata.creation_timestamp))


def runtime_taint_input(obj: Mapping[str, Any], packages: Sequence[RuntimePackage]) -> RuntimeTaintInput:
    """The taint rule's input for a Node object (API JSON)."""
    created = parse_time(str((obj.get("metadata") or {}).get("creationTimestamp") or ""))
    return RuntimeTaintInput(node_view(obj), created, packages)
