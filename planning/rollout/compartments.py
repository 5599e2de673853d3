"""Compartments of a DeploymentPolicy: node assignment, absolute budgets, stable node order. Pure.

Rules:
* a node belongs to the compartments whose selector matches its labels; nodes matching none go
  to `default` (the policy's `spec.default`);
* a node matching several takes the safest: strategy `fixed` before `linear` before
  `exponential`, then the smaller absolute budget (computed on the number of nodes that match
  that compartment's selector), then the compartment name (NodeWright's rule, kept);
* an absolute budget is `count`, or `percent` of the compartment's size rounded up, at least 1
  (NodeWright rounds down, which turns 10% of 5 nodes into a budget of 0 raised to 1; rounding up
  keeps the same minimum and never budgets less than the percent says);
* node order is stable: sorted by sha256 of `<identity>/<node>` where identity names the
  package and version, so a restarted rollout picks the same nodes and different packages
  spread their canaries over different nodes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from api.enums import StrategyType
from api.policy import DEFAULT_COMPARTMENT, Budget, DeploymentPolicySpec, PolicyDefault, Strategy

# Lower is safer.
STRATEGY_SAFETY: dict[StrategyType, int] = {
    StrategyType.FIXED: 0,
    StrategyType.LINEAR: 1,
    StrategyType.EXPONENTIAL: 2,
    # A policy rolls in every compartment or in none, so rolling is only ranked against itself (then by
    # budget and name); without it a node matching two rolling compartments crashed the assignment.
    StrategyType.ROLLING: 0,
}

# A Package without `deploymentPolicy` rolls one node at a time: the safe default.
DEFAULT_POLICY = DeploymentPolicySpec(default=PolicyDefault(budget=Budget(count=1), strategy=Strategy()))


@dataclass(frozen=True)
class NodeInfo:
    """A target node as the planner sees it: its name and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def absolute_budget(count: int | None, percent: int | None, size: int) -> int:
    """Nodes that may be disrupted at once in a compartment of `size` nodes (at least 1)."""
    if count is not None:
        return max(1, count)
    return max(1, math.ceil(size * (percent or 100) / 100))


def package_identity(package: str, version: str) -> str:
    """The identity hashed into node order: package name and version."""
    return f"{package}@{version}"


def order_key(node: str, identity: str) -> str:
    """Sort key of `node` for a rollout with `identity` (stable across restarts)."""
    return hashlib.sha256(f"{identity}/{node}".encode()).hexdigest()


def stable_order(nodes: Iterable[str], identity: str) -> list[str]:
    """`nodes` in the rollout's stable order (hash of identity and node, then name)."""
    return sorted(set(nodes), key=lambda n: (order_key(n, identity), n))


def assign_compartments(policy: DeploymentPolicySpec, nodes: Sequence[NodeInfo]) -> dict[str, str]:
    """Node name -> compartment name, by the module's rules."""
    matched: dict[str, int] = {
        c.name: sum(1 for n in nodes if c.selector.matches(n.labels)) for c in policy.compartments
    }

    def safety(name: str) -> tuple[int, int, str]:
        comp = next(c for c in policy.compartments if c.name == name)
        strategy = comp.strategy or policy.default.strategy
        limit = absolute_budget(comp.budget.count, comp.budget.percent, matched[name])
        return STRATEGY_SAFETY[strategy.type], limit, name

    result: dict[str, str] = {}
    for node in nodes:
        candidates = [c.name for c in policy.compartments if c.selector.matches(node.labels)]
        result[node.name] = min(candidates, key=safety) if candidates else DEFAULT_COMPARTMENT
    return result


def selector_label_keys(policy: DeploymentPolicySpec) -> list[str]:
    """Label keys the policy's compartment selectors read (the only labels a fleet's listing keeps)."""
    found: set[str] = set()
    for compartment in policy.compartments:
        found |= set(compartment.selector.match_labels)
        found |= {r.key for r in compartment.selector.match_expressions}
    return sorted(found)
