"""Capacity floors and topology limits: may this node enter a window, given what is out now? Pure.

The rules of `budget.minAvailable` and `budget.maxUnavailablePerTopology` (`api/capacity.py`,
ADR 0015), over a snapshot of the fleet's nodes (`Supply`: per node its compartment, its
allocatable units of the floors' resources, its topology label values and why it is down, if it
is; plus the nodes this fleet has in windows):

* a node is *down* when it is in a node window (this fleet's, or any node labelled
  `noderoll.io/status=in-progress`), cordoned, or NotReady; its capacity does not count;
* floor: a node that is up may enter a window only if its compartment's available units of the
  resource, minus its own, stay at or above the floor (`count`, or `percent` of the units summed
  over the compartment's nodes, rounded up). A node already down takes nothing away;
* topology: for each limit of the node's compartment, the nodes of that compartment down with the
  node's value of `key`, plus the node itself, must not exceed `max` (counted within the
  compartment, as its budget is). Nodes without the label share one group.

`may_enter(supply, node)` answers one question (`None`, or the `Wait` with its reason): what a
planner without batches (a rolling strategy) or `noderoll plan` asks. The batch planner
(`planning/rollout/batches.py`) asks a `Tally` node after node, taking each admitted node out, so one batch
never breaks a rule by its own nodes. `Wait.text` is the reason users read ("rack r12 has 1 node in a
window (max 1)", "1,792 of 1,800 GPUs would remain"); `capacity_use` is what the status and the
metrics show per floor.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from api.policy import DEFAULT_COMPARTMENT, DeploymentPolicySpec
from planning.rollout.compartments import NodeInfo, assign_compartments, selector_label_keys

# Why a node's capacity does not count (`NodeSupply.down`; "" = it counts).
DOWN_WINDOW = "in a window"
# The prefix of `planning.rollout.respect`'s reasons (kept here too: respect imports this module's siblings).
DOWN_MAINTENANCE = "held by other maintenance"
DOWN_CORDONED = "cordoned"
DOWN_NOT_READY = "NotReady"
RULE_FLOOR = "floor"
RULE_TOPOLOGY = "topology"
# The count budget full of nodes down for someone else's reason; a node another maintenance holds.
RULE_COUNT = "count"
RULE_MAINTENANCE = "maintenance"
# The nodes could not be read before their windows (planning.fleet.handout): nothing starts unchecked.
RULE_UNREAD = "unread"
# Down nodes named in a message or a status (all are counted).
DOWN_SHOWN = 3


@dataclass(frozen=True)
class Floor:
    """`minAvailable` of one compartment."""

    resource: str
    count: int | None = None
    percent: int | None = None

    def units(self, total: int) -> int:
        """The floor in units of the resource, for a compartment holding `total` units."""
        if self.count is not None:
            return self.count
        return math.ceil(total * (self.percent or 0) / 100)


@dataclass(frozen=True)
class Spread:
    """One `maxUnavailablePerTopology` entry."""

    key: str
    max: int


@dataclass(frozen=True)
class CompartmentLimits:
    """The floor and topology limits of one compartment."""

    floor: Floor | None = None
    spreads: tuple[Spread, ...] = ()


@dataclass(frozen=True)
class NodeSupply:
    """One node as the floors and topology limits see it."""

    compartment: str = DEFAULT_COMPARTMENT
    # Allocatable units of each floor's resource (absent: none).
    resources: Mapping[str, int] = field(default_factory=dict)
    # The node's values of the topology keys (absent: the node has no such label).
    labels: Mapping[str, str] = field(default_factory=dict)
    # Why its capacity does not count now ("" = up): DOWN_WINDOW, DOWN_CORDONED or DOWN_NOT_READY.
    down: str = ""


@dataclass(frozen=True)
class Supply:
    """A snapshot: every node of the fleet, the limits per compartment, this fleet's windows out."""

    limits: Mapping[str, CompartmentLimits]
    nodes: Mapping[str, NodeSupply]
    in_windows: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Wait:
    """Why a node may not enter a window now."""

    node: str
    rule: str
    compartment: str
    text: str


@dataclass
class CapacityUse:
    """One floor as a batch plan leaves it: units available with the batch out, the floor, the total."""

    compartment: str = DEFAULT_COMPARTMENT
    resource: str = ""
    available: int = 0
    floor: int = 0
    total: int = 0
    # Nodes of the compartment down for reasons other than this fleet's windows ("name (why)"), the first few.
    down: list[str] = field(default_factory=list)
    down_count: int = 0


@dataclass
class WaitNote:
    """The nodes one rule held back in one compartment at the latest batch plan, and the first reason."""

    compartment: str = DEFAULT_COMPARTMENT
    rule: str = RULE_FLOOR
    nodes: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Others:
    """What other people and controllers hold, as a fleet's budgets count it (`spec.respect`, issue 44):
    per compartment the nodes down for someone else's reason (cordoned, held by another maintenance; not
    in this fleet's windows) with that reason, which take slots of its count budget; and the nodes another
    maintenance holds (node -> why), which are not started."""

    busy: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    held: Mapping[str, str] = field(default_factory=dict)

    def full_text(self, compartment: str, budget: int) -> str:
        """Why a compartment's count budget has no slot left: the nodes that fill it (the first few)."""
        busy = [f"{n} ({why})" for n, why in sorted(self.busy.get(compartment, {}).items())]
        more = f" and {len(busy) - DOWN_SHOWN} more" if len(busy) > DOWN_SHOWN else ""
        where = "" if compartment == DEFAULT_COMPARTMENT else f" of compartment {compartment}"
        return (f"{_plural(len(busy), 'node')}{where} down for other reasons ({', '.join(busy[:DOWN_SHOWN])}{more}) "
                f"fill its budget of {budget}")


def is_held_by_others(down: str) -> bool:
    """`down` says another maintenance holds the node (`planning.rollout.respect.DOWN_MAINTENANCE`)."""
    return down.startswith(DOWN_MAINTENANCE)


def limits_of(policy: DeploymentPolicySpec) -> dict[str, CompartmentLimits]:
    """Compartment -> its floor and topology limits; compartments without either are left out."""
    budgets = [(DEFAULT_COMPARTMENT, policy.default.budget), *((c.name, c.budget) for c in policy.compartments)]
    out = {}
    for name, budget in budgets:
        floor = budget.min_available
        spreads = tuple(Spread(t.key, t.max) for t in budget.topology_limits)
        if floor is not None or spreads:
            out[name] = CompartmentLimits(
                Floor(floor.resource, floor.count, floor.percent) if floor else None, spreads)
    return out


def floor_resources(policy: DeploymentPolicySpec) -> list[str]:
    """The resources the policy's floors count (what a listing must report per node)."""
    return sorted({lim.floor.resource for lim in limits_of(policy).values() if lim.floor is not None})


def topology_keys(policy: DeploymentPolicySpec) -> list[str]:
    """The label keys the policy's topology limits read."""
    return sorted({s.key for lim in limits_of(policy).values() for s in lim.spreads})


def listing_label_keys(policy: DeploymentPolicySpec) -> list[str]:
    """The label keys a fleet's listing keeps: its compartment selectors' and its topology limits'."""
    return sorted({*selector_label_keys(policy), *topology_keys(policy)})


class Listed(Protocol):
    """What a listing says of one node (`planning.rollout.fleet_targets.NodeTargets` is one)."""

    labels: dict[str, str]
    capacity: dict[str, int]
    down: str


def supply_of(policy: DeploymentPolicySpec, listed: Mapping[str, Listed], compartments: Mapping[str, str],
              in_windows: Collection[str] = ()) -> Supply | None:
    """The snapshot of a listing under `policy` (None when the policy has neither floors nor topology limits).

    `compartments`: the planner's assignment (node -> compartment); nodes it does not know (not
    eligible: every Package blocked, waiting or paused there) are assigned by the same rules, so
    their capacity counts in their compartment too.
    """
    limits = limits_of(policy)
    if not limits:
        return None
    keys = topology_keys(policy)
    assigned = every_compartment(policy, listed, compartments)
    nodes = {
        name: NodeSupply(assigned[name], dict(node.capacity), {k: node.labels[k] for k in keys if k in node.labels},
                         node.down)
        for name, node in listed.items()
    }
    return Supply(limits, nodes, frozenset(in_windows))


def every_compartment(policy: DeploymentPolicySpec, listed: Mapping[str, Listed],
                      compartments: Mapping[str, str]) -> dict[str, str]:
    """Node -> compartment for every listed node: the planner's assignment, and for the nodes it does not
    know (not eligible: every Package blocked, waiting or paused there) the same rules'."""
    unknown = [NodeInfo(name, node.labels) for name, node in sorted(listed.items()) if name not in compartments]
    return {**assign_compartments(policy, unknown), **compartments}


def noun(resource: str) -> str:
    """How a message names units of `resource` (`nvidia.com/gpu` -> GPUs)."""
    return "GPUs" if resource.rsplit("/", 1)[-1].lower() == "gpu" else resource


def _group_name(key: str, value: str | None) -> str:
    short = key.rsplit("/", 1)[-1]
    return f"{short} {value}" if value is not None else f"nodes without {key}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class Tally:
    """The accounting of one decision: what is down, what is available; `take` puts a node in a window."""

    def __init__(self, supply: Supply) -> None:
        self.supply = supply
        self.out: set[str] = set(supply.in_windows)
        self.total: dict[str, int] = {}
        self.available: dict[str, int] = {}
        # (compartment, key, value or None) -> nodes of the compartment down in that group.
        self.groups: dict[tuple[str, str, str | None], set[str]] = {}
        for name, node in supply.nodes.items():
            floor = self._floor(node)
            if floor is not None:
                units = node.resources.get(floor.resource, 0)
                self.total[node.compartment] = self.total.get(node.compartment, 0) + units
                if self._up(name):
                    self.available[node.compartment] = self.available.get(node.compartment, 0) + units
            if not self._up(name):
                self._count_down(name, node)

    def _count_down(self, name: str, node: NodeSupply) -> None:
        limits = self.supply.limits.get(node.compartment)
        for spread in limits.spreads if limits is not None else ():
            self.groups.setdefault((node.compartment, spread.key, node.labels.get(spread.key)), set()).add(name)

    def _floor(self, node: NodeSupply) -> Floor | None:
        limits = self.supply.limits.get(node.compartment)
        return limits.floor if limits is not None else None

    def _up(self, name: str) -> bool:
        node = self.supply.nodes.get(name)
        return node is not None and not node.down and name not in self.out

    def floor_units(self, compartment: str) -> int:
        """The floor of `compartment` in units (0 without one)."""
        limits = self.supply.limits.get(compartment)
        if limits is None or limits.floor is None:
            return 0
        return limits.floor.units(self.total.get(compartment, 0))

    def check(self, name: str) -> Wait | None:
        """None when `name` may enter a window now; else why not (the first rule it breaks)."""
        node = self.supply.nodes.get(name)
        if node is None or name in self.out:
            return None
        floor = self._floor(node)
        if floor is not None and self._up(name):
            units = node.resources.get(floor.resource, 0)
            left = self.available.get(node.compartment, 0) - units
            needed = self.floor_units(node.compartment)
            if units and left < needed:
                return Wait(name, RULE_FLOOR, node.compartment, self._floor_text(node.compartment, floor, left, needed))
        limits = self.supply.limits.get(node.compartment)
        for spread in limits.spreads if limits is not None else ():
            value = node.labels.get(spread.key)
            down = self.groups.get((node.compartment, spread.key, value), set()) - {name}
            if len(down) + 1 > spread.max:
                return Wait(name, RULE_TOPOLOGY, node.compartment, self._spread_text(spread, value, down))
        return None

    def take(self, name: str) -> None:
        """`name` enters a window: its units are no longer available, its groups count it down."""
        node = self.supply.nodes.get(name)
        if node is None or name in self.out:
            return
        floor = self._floor(node)
        if floor is not None and self._up(name):
            self.available[node.compartment] = (self.available.get(node.compartment, 0)
                                                - node.resources.get(floor.resource, 0))
        self.out.add(name)
        self._count_down(name, node)

    def _down_elsewhere(self, compartment: str) -> list[str]:
        """Nodes of `compartment` down for reasons other than this fleet's windows, as `name (why)`."""
        return [f"{n} ({s.down})" for n, s in sorted(self.supply.nodes.items())
                if s.compartment == compartment and s.down and n not in self.out]

    def _floor_text(self, compartment: str, floor: Floor, left: int, needed: int) -> str:
        where = "" if compartment == DEFAULT_COMPARTMENT else f" in compartment {compartment}"
        text = f"{left:,} of {needed:,} {noun(floor.resource)} would remain{where}"
        down = self._down_elsewhere(compartment)
        if down:
            more = f" and {len(down) - DOWN_SHOWN} more" if len(down) > DOWN_SHOWN else ""
            text += f"; down: {', '.join(down[:DOWN_SHOWN])}{more}"
        return text

    def _spread_text(self, spread: Spread, value: str | None, down: set[str]) -> str:
        why: dict[str, int] = {}
        for name in down:
            node = self.supply.nodes.get(name)
            reason = DOWN_WINDOW if name in self.out or node is None else node.down
            why[reason] = why.get(reason, 0) + 1
        group = _group_name(spread.key, value)
        if set(why) == {DOWN_WINDOW}:
            return f"{group} has {_plural(len(down), 'node')} in a window (max {spread.max})"
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(why.items()))
        return f"{group} has {_plural(len(down), 'node')} unavailable ({parts}) (max {spread.max})"

    def use(self) -> list[CapacityUse]:
        """Each floor as things stand now (the nodes taken included)."""
        out = []
        for compartment, limits in sorted(self.supply.limits.items()):
            if limits.floor is None:
                continue
            down = self._down_elsewhere(compartment)
            out.append(CapacityUse(compartment, limits.floor.resource, self.available.get(compartment, 0),
                                   self.floor_units(compartment), self.total.get(compartment, 0),
                                   down[:DOWN_SHOWN], len(down)))
        return out


def after_windows(supply: Supply, nodes: Collection[str]) -> Supply:
    """`supply` once the windows of `nodes` ended: they are up again (a preview of the next batch)."""
    gone = set(nodes)
    listed = {n: replace(s, down="") if n in gone else s for n, s in supply.nodes.items()}
    return Supply(supply.limits, listed, supply.in_windows - gone)


def may_enter(supply: Supply, node: str, also: Collection[str] = ()) -> Wait | None:
    """None when `node` may enter a window now (with `also` in windows besides `supply.in_windows`)."""
    tally = Tally(supply)
    for other in sorted(also):
        tally.take(other)
    return tally.check(node)


def capacity_use(supply: Supply) -> list[CapacityUse]:
    """Each floor with this fleet's windows out (status, metrics)."""
    return Tally(supply).use()


def notes(waits: Collection[Wait]) -> list[WaitNote]:
    """The waits summed per compartment and rule (the first reason of each kept)."""
    out: dict[tuple[str, str], WaitNote] = {}
    for wait in waits:
        note = out.setdefault((wait.compartment, wait.rule), WaitNote(wait.compartment, wait.rule, 0, wait.text))
        note.nodes += 1
    return [out[key] for key in sorted(out)]


def describe(notes_: Collection[WaitNote]) -> str:
    """One line for a fleet's message: `waiting: <reason>, N nodes held; ...`."""
    parts = [f"{n.reason}, {_plural(n.nodes, 'node')} held" for n in notes_]
    return f"waiting: {'; '.join(parts)}" if parts else ""
