"""NodeWright rollout settings as noderoll DeploymentPolicy specs, for `noderoll import`. Pure (no I/O).

Two sources:
* a NodeWright `DeploymentPolicy`: field by field. `default` and `compartments[]` keep their shape;
  a strategy, one of NodeWright's `fixed: {...}`, `linear: {...}` or `exponential: {...}`, becomes
  `{type, ...}` with the same fields (`initialBatch`, `delta`, `growthFactor`, `batchThreshold`,
  `failureThreshold`, `safetyLimit`; unset ones take noderoll's defaults, which are NodeWright's
  webhook defaults). Compartment names that are not DNS labels are rewritten (lowercase, other
  characters as `-`); `resetBatchStateOnCompletion: false` cannot be carried (each noderoll wave
  starts from its first batch, as with `true`).
* a Skyhook's legacy `interruptionBudget`: NodeWright then used one compartment whose budget is the
  interruption budget and a fixed strategy whose batch is that budget's ceiling. `count: N`
  becomes budget `count: N` with `initialBatch: N`; `percent: P` becomes budget `percent: P` with
  `initialBatch` `WHOLE_BUDGET_BATCH`, so every batch is the whole budget (noderoll caps a batch by
  its budget; it rounds a percent up where NodeWright rounded down). 0 meant one node at a time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from api.names import is_valid_name
from api.nodewright_fields import Notes, Unmappable, as_mapping, first_problem, selector, unknown_fields
from api.policy import DEFAULT_COMPARTMENT, DeploymentPolicySpec

# A batch no compartment can reach (Kubernetes documents 5000 nodes per cluster as its limit), so
# the budget alone sizes each batch, as NodeWright's legacy ceiling did.
WHOLE_BUDGET_BATCH = 5000
_COMMON_FIELDS = ("initialBatch", "batchThreshold", "failureThreshold", "safetyLimit")
STRATEGY_FIELDS: dict[str, tuple[str, ...]] = {
    "fixed": _COMMON_FIELDS,
    "linear": ("initialBatch", "delta", "batchThreshold", "failureThreshold", "safetyLimit"),
    "exponential": ("initialBatch", "growthFactor", "batchThreshold", "failureThreshold", "safetyLimit"),
}
_MAX_NAME = 43


def _integer(value: Any, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unmappable(at, f"is {type(value).__name__}, not a whole number")
    return value


def budget(value: Any, at: str) -> dict[str, int]:
    """A DeploymentPolicy budget: exactly one of `count` and `percent`."""
    data = as_mapping(value, at, "a budget (count or percent)")
    given = {key: _integer(data[key], f"{at}.{key}") for key in ("count", "percent") if data.get(key) is not None}
    if len(given) != 1:
        raise Unmappable(at, "needs exactly one of count and percent (NodeWright refuses it too)")
    return given


def strategy(value: Any, at: str, notes: Notes) -> dict[str, Any] | None:
    """NodeWright's `{fixed|linear|exponential: {...}}` as noderoll's `{type, ...}` (None: unset)."""
    if value is None:
        return None
    data = as_mapping(value, at, "a strategy")
    unknown_fields(data, set(STRATEGY_FIELDS), at, notes, "not a NodeWright strategy (fixed, linear, exponential)")
    present = [kind for kind in STRATEGY_FIELDS if data.get(kind) is not None]
    if len(present) != 1:
        raise Unmappable(at, "needs exactly one of fixed, linear and exponential (NodeWright refuses it too)")
    kind = present[0]
    params = as_mapping(data[kind], f"{at}.{kind}", f"the {kind} strategy's fields")
    unknown_fields(params, set(STRATEGY_FIELDS[kind]), f"{at}.{kind}", notes, f"not a field of the {kind} strategy")
    out: dict[str, Any] = {"type": kind}
    for name in STRATEGY_FIELDS[kind]:
        if params.get(name) is not None:
            out[name] = _integer(params[name], f"{at}.{kind}.{name}")
    return out


def compartment_name(value: Any, at: str, taken: set[str], notes: Notes) -> str:
    """The compartment's name, rewritten as a DNS label when it is not one."""
    if not isinstance(value, str) or not value:
        raise Unmappable(at, "missing: a compartment needs a name")
    name = value
    if not is_valid_name(name) or name == DEFAULT_COMPARTMENT:
        name = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")[:_MAX_NAME].rstrip("-")
        if not name or name == DEFAULT_COMPARTMENT:
            raise Unmappable(at, f"{value!r} has no DNS-label form that is not reserved ('default'); rename it")
        notes.not_carried(at, f"{value!r} written as {name!r}: noderoll compartment names are lowercase DNS labels "
                          "of at most 43 characters")
    if name in taken:
        raise Unmappable(at, f"{name!r} names two compartments; rename one")
    taken.add(name)
    return name


def compartments(value: Any, at: str, notes: Notes) -> list[dict[str, Any]]:
    """`compartments[]`: name, selector, budget and (optional) strategy, each carried."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise Unmappable(at, "is not a list of compartments")
    out, taken = [], set()
    for index, item in enumerate(value):
        where = f"{at}[{index}]"
        data = as_mapping(item, where, "a compartment")
        unknown_fields(data, {"name", "selector", "budget", "strategy"}, where, notes, "not a compartment field")
        compartment: dict[str, Any] = {
            "name": compartment_name(data.get("name"), f"{where}.name", taken, notes),
            # An empty selector selects every node, in both systems.
            "selector": selector(as_mapping(data.get("selector"), f"{where}.selector", "a label selector"),
                                 f"{where}.selector") or {},
            "budget": budget(data.get("budget"), f"{where}.budget"),
        }
        chosen = strategy(data.get("strategy"), f"{where}.strategy", notes)
        if chosen is not None:
            compartment["strategy"] = chosen
        out.append(compartment)
    return out


def policy_spec(value: Any, at: str, notes: Notes) -> dict[str, Any]:
    """A NodeWright DeploymentPolicy `spec` as a valid noderoll DeploymentPolicy spec."""
    data = as_mapping(value, at, "a DeploymentPolicy spec")
    unknown_fields(data, {"default", "compartments", "resetBatchStateOnCompletion"}, at, notes,
                   "not a NodeWright DeploymentPolicy field")
    default = as_mapping(data.get("default"), f"{at}.default", "the default budget and strategy")
    if not default:
        raise Unmappable(f"{at}.default", "missing: a policy needs its default budget (NodeWright refuses it too)")
    unknown_fields(default, {"budget", "strategy"}, f"{at}.default", notes, "not a field of the default")
    spec: dict[str, Any] = {"default": {"budget": budget(default.get("budget"), f"{at}.default.budget")}}
    chosen = strategy(default.get("strategy"), f"{at}.default.strategy", notes)
    if chosen is None:
        notes.not_carried(f"{at}.default.strategy", "missing (NodeWright's CRD requires it); noderoll's default "
                          "holds: fixed, initialBatch 1")
    else:
        spec["default"]["strategy"] = chosen
    groups = compartments(data.get("compartments"), f"{at}.compartments", notes)
    if groups:
        spec["compartments"] = groups
    if data.get("resetBatchStateOnCompletion") is False:
        notes.not_carried(f"{at}.resetBatchStateOnCompletion", "false cannot be carried: each noderoll wave (a "
                          "change of a Package or of the policy) starts from its first batch, as with true")
    return checked(spec, at)


def checked(spec: dict[str, Any], at: str) -> dict[str, Any]:
    """`spec` when noderoll's model accepts it, else Unmappable with the model's reason."""
    try:
        DeploymentPolicySpec.model_validate(spec)
    except ValidationError as err:
        raise Unmappable(at, f"the noderoll policy would be invalid: {first_problem(err, at)}") from err
    return spec


def _legacy_spec(count: int | None, percent: int | None) -> dict[str, Any]:
    chosen = {"count": count} if count is not None else {"percent": percent}
    batch = count if count is not None else WHOLE_BUDGET_BATCH
    return {"default": {"budget": chosen, "strategy": {"type": "fixed", "initialBatch": batch}}}


def budget_policy(value: Any, at: str, notes: Notes) -> dict[str, Any] | None:
    """A Skyhook's `interruptionBudget` as a policy spec; None when it sets neither field."""
    data = as_mapping(value, at, "an interruptionBudget (count or percent)")
    unknown_fields(data, {"count", "percent"}, at, notes, "not an interruptionBudget field")
    count = _integer(data["count"], f"{at}.count") if data.get("count") is not None else None
    percent = _integer(data["percent"], f"{at}.percent") if data.get("percent") is not None else None
    if count is not None and percent is not None:
        notes.not_carried(f"{at}.percent", "NodeWright refuses percent together with count; count is carried")
        percent = None
    for key, amount in (("count", count), ("percent", percent)):
        if amount is not None and amount < 1:
            notes.not_carried(f"{at}.{key}", f"{amount}: NodeWright still updates one node at a time then (its "
                              "ceiling is at least 1); written as count 1")
            count, percent = 1, None
    if percent is not None and percent > 100:
        raise Unmappable(f"{at}.percent", f"{percent} is more than 100 (NodeWright refuses it too)")
    if count is None and percent is None:
        return None
    return checked(_legacy_spec(count, percent), at)


def wants_budget_policy(spec: Any) -> bool:
    """True when a Skyhook spec gets its policy from `interruptionBudget` (set, and no deploymentPolicy)."""
    if not isinstance(spec, Mapping) or spec.get("deploymentPolicy"):
        return False
    legacy = spec.get("interruptionBudget")
    return isinstance(legacy, Mapping) and any(legacy.get(k) is not None for k in ("count", "percent"))
