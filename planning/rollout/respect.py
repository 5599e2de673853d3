"""Other maintenance a fleet keeps out of (`spec.respect`, api/respect.py): is a node held by another
controller? Pure (no I/O).

* `respect_of`: the settings in force: the policy's `respect`, else the defaults (the default taints
  and NodeMaintenance objects respected);
* `may_start`: None when nothing else holds the node, else the `Hold`: the first respected taint on
  it (by key order), else the NodeMaintenance of another requestor naming it (the listing puts it in
  `NodeView.maintenance`, reading them only when `nodeMaintenance` is respected). For the fleet's
  decision core: a held node is not started;
* `maintenance_reason`: the reason the listing reports such a node down with (`DOWN_MAINTENANCE`, then what
  holds it), next to `planning.rollout.disruption`'s reasons (in a window, cordoned, NotReady).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from api.respect import DEFAULT_TAINTS, TAINT_OWNERS, RespectSpec
from planning.node.targets import NodeView
from planning.rollout.disruption import DOWN_MAINTENANCE

HOLD_TAINT = "taint"
HOLD_NODE_MAINTENANCE = "NodeMaintenance"


@dataclass(frozen=True)
class Respect:
    """The respect settings in force for one fleet."""

    taints: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_TAINTS))
    node_maintenance: bool = True


def respect_from_json(data: Mapping[str, object] | None) -> Respect | None:
    """The settings a listing or read is asked with (`ListFleetNodesInput.respect`): None, not asked; {}, the
    policy has none (the defaults); else the policy's `spec.respect` as JSON."""
    return None if data is None else respect_of(RespectSpec.model_validate(data) if data else None)


def respect_of(spec: RespectSpec | None) -> Respect:
    """The settings of a policy's `spec.respect` (None: the defaults)."""
    if spec is None:
        return Respect()
    return Respect(frozenset(spec.taint_keys), spec.node_maintenance)


@dataclass(frozen=True)
class Hold:
    """What holds a node: a respected taint (its key) or a NodeMaintenance (as the listing describes it)."""

    kind: str
    what: str

    @property
    def text(self) -> str:
        """One line: `taint <key> (<who sets it>)` or `NodeMaintenance <namespace>/<name> ...`."""
        if self.kind == HOLD_TAINT:
            owner = TAINT_OWNERS.get(self.what)
            return f"taint {self.what}" + (f" ({owner})" if owner else "")
        return f"{HOLD_NODE_MAINTENANCE} {self.what}"


def may_start(node: NodeView, respect: Respect) -> Hold | None:
    """None when no respected maintenance holds `node`, else what holds it (module rules)."""
    keys = sorted({str(t.get("key") or "") for t in node.taints} & respect.taints)
    if keys:
        return Hold(HOLD_TAINT, keys[0])
    if respect.node_maintenance and node.maintenance:
        return Hold(HOLD_NODE_MAINTENANCE, node.maintenance)
    return None


def maintenance_reason(node: NodeView, respect: Respect | None) -> str:
    """The listing's down reason of a held node ("" when nothing holds it, or nothing is respected)."""
    hold = may_start(node, respect) if respect is not None else None
    return f"{DOWN_MAINTENANCE}: {hold.text}" if hold is not None else ""
