"""Reruns: a fleet runs a completed Package again on some or all of its nodes. Pure (no I/O, deterministic).

An operator asks with the fleet signal `rerun` (`protocol.fleet.Rerun`: id, Package, nodes, stage;
`noderoll rerun`) or the Package annotation `noderoll.io/rerun: "<id>[:<stage>]"` that the bridge
hands over in the desired state (`rerun_from_annotation`). Rules:

* a stage other than `apply`, `config`, `interrupt`, `post-interrupt` (or none) is refused (the
  fleet's message says so); the CLI refuses it before sending;
* once per id: an id the fleet has taken is ignored when it comes again (a repeated signal, the
  annotation in every desired state the bridge sends); the last `SEEN_IDS` ids are remembered;
* the nodes are fixed when the fleet first knows its targets after taking the rerun (`resolve`):
  the nodes named (all of the fleet's nodes when none are) where the Package is targeted and has
  no other work (`done` in the listing) or is pending; a node not among them is not asked;
* each of those nodes is asked once: its next window carries the Package with the rerun marker
  (`protocol.fleet.PackageOrder.rerun`), and the node plan runs the install sequence again from
  the stage (`planning.node.node_plan.rerun_plan`); the answer to the window that carried it
  (complete, erroring, blocked) ends the rerun there, a withdrawal does not, and a window
  handed out before the rerun was taken does not count;
* a paused Package waits (a pause keeps it out of new windows, reruns included); a new wave keeps
  the reruns that are not done.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from planning.node.node_plan import RERUN_STAGES
from planning.rollout.fleet_targets import NodeTargets
from protocol.fleet import Rerun

# Stages a rerun may start at ("": the whole install sequence); others are refused (`take`).
STAGES = ("", *(s.value for s in RERUN_STAGES))
# Rerun ids a fleet remembers (a repeated id among them is ignored).
SEEN_IDS = 200
ANNOTATION_ID_PREFIX = "annotation:"


@dataclass
class RerunOrder:
    """A rerun the fleet took and has not finished."""

    id: str
    package: str
    stage: str = ""
    # The nodes named by the operator (empty: every node of the fleet).
    only: list[str] = field(default_factory=list)
    # Fixed by `resolve`: the nodes still to ask.
    nodes: list[str] = field(default_factory=list)
    resolved: bool = False


def rerun_from_annotation(package: str, value: str) -> Rerun | None:
    """The `Rerun` an annotation value `<id>[:<stage>]` asks for (None when empty)."""
    value = value.strip()
    if not value:
        return None
    rerun_id, _, stage = value.partition(":")
    return Rerun(id=f"{ANNOTATION_ID_PREFIX}{package}:{rerun_id.strip()}", package=package, stage=stage.strip())


def take(reruns: list[RerunOrder], seen: list[str], request: Rerun) -> bool:
    """Record `request` unless its id was seen or its stage is not a rerun stage; True when it was taken."""
    if not request.id or request.id in seen or request.stage not in STAGES:
        return False
    seen.append(request.id)
    del seen[:-SEEN_IDS]
    reruns.append(RerunOrder(request.id, request.package, request.stage, sorted(set(request.nodes))))
    return True


def resolve(reruns: list[RerunOrder], targets: Mapping[str, NodeTargets]) -> list[tuple[str, str]]:
    """Fix the nodes of reruns taken since the last listing; returns the (node, Package) pairs asked again.

    Call with the fleet's current targets (not before its first listing of a wave).
    """
    asked = []
    for order in reruns:
        if order.resolved:
            continue
        order.resolved = True
        order.nodes = sorted(
            node for node, t in targets.items()
            if (not order.only or node in order.only) and (order.package in t.done or order.package in t.pending)
        )
        asked += [(node, order.package) for node in order.nodes]
    return asked


def for_node(reruns: list[RerunOrder], node: str) -> dict[str, RerunOrder]:
    """Package -> the rerun its next window on `node` must carry (the oldest one per Package)."""
    found: dict[str, RerunOrder] = {}
    for order in reruns:
        if order.resolved and node in order.nodes:
            found.setdefault(order.package, order)
    return found


def wanted_again(reruns: list[RerunOrder], node: str, targets: NodeTargets | None,
                 answered: Collection[str]) -> list[str]:
    """Packages complete on `node` that a rerun wants in its next window (not yet answered this wave)."""
    if targets is None:
        return []
    return sorted(p for p in for_node(reruns, node) if p in targets.done and p not in answered)


def answered(reruns: list[RerunOrder], node: str, ids: Collection[str]) -> None:
    """`node` answered a window that carried the reruns `ids`: they are done there; finished reruns are dropped."""
    for order in reruns:
        if order.id in ids and node in order.nodes:
            order.nodes.remove(node)
    reruns[:] = [o for o in reruns if not o.resolved or o.nodes]
