"""Builders for the fleet's pure logic (planning/rollout/fleet_targets.py, fleet_state.py, fleet_status.py).

Plain functions returning the real value types; nothing here talks to Temporal or Kubernetes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from api.enums import State
from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from planning.node.targets import NodeView
from planning.rollout.fleet_targets import FleetPackage, FleetSelection, NodeTargets
from protocol.fleet import FleetSpec, PackageEntry, PackageOutcome, WindowResult

GPU = {"pool": "gpu"}
SELECTOR = {"matchLabels": GPU}


def a_spec(name: str = "pkg", version: str = "1.0.0", **fields: Any) -> dict[str, Any]:
    """A Package spec as JSON (by alias), selecting `pool=gpu` unless `nodeSelector` is given."""
    return {"version": version, "image": f"example.test/{name}:{version}", "nodeSelector": SELECTOR, **fields}


def a_package(name: str = "pkg", version: str = "1.0.0", *, paused: bool = False, uninstall: bool = False,
              **fields: Any) -> FleetPackage:
    """A `FleetPackage` (target selection's view of one Package)."""
    return FleetPackage(PackageSpec.model_validate(a_spec(name, version, **fields)), uninstall=uninstall,
                        paused=paused)


def an_entry(name: str = "pkg", version: str = "1.0.0", *, generation: int = 1, paused: bool = False,
             spec_paused: bool = False, uninstall: bool = False, **fields: Any) -> PackageEntry:
    """A `PackageEntry` (the bridge's view of one Package, as a fleet receives it).

    `paused`: the entry's flag (spec.paused or the annotation, as the bridge sets it); `spec_paused`:
    `paused: true` inside the spec itself.
    """
    spec = a_spec(name, version, **fields)
    if spec_paused:
        spec["paused"] = True
    return PackageEntry(name=name, spec=spec, generation=generation, paused=paused or spec_paused,
                        uninstall=uninstall)


def a_fleet_spec(*entries: PackageEntry, policy: dict[str, Any] | None = None, name: str = "gpu") -> FleetSpec:
    """A `FleetSpec` of `entries` under `policy` (None: the built-in default policy)."""
    return FleetSpec(policy_name=name, policy=policy, policy_generation=1, packages=list(entries))


def a_policy(budget: int = 10, initial: int = 1, canary: int = 0, strategy: str = "fixed",
             **extra: Any) -> DeploymentPolicySpec:
    """A DeploymentPolicySpec: one default compartment with a count budget."""
    spec: dict[str, Any] = {
        "default": {"budget": {"count": budget}, "strategy": {"type": strategy, "initialBatch": initial}},
        **extra,
    }
    if canary:
        spec["canary"] = {"count": canary}
    return DeploymentPolicySpec.model_validate(spec)


def entry_record(version: str, state: str = State.COMPLETE.value, **fields: Any) -> dict[str, Any]:
    """One package's `noderoll.io/state` entry: by default a finished install of `version`."""
    return {"version": version, "image": fields.pop("image", ""), "state": state, **fields}


def recorded(**packages: str | dict[str, Any]) -> str:
    """A `noderoll.io/state` annotation: package -> version (complete) or a full entry."""
    entries = {name: entry_record(v) if isinstance(v, str) else v for name, v in packages.items()}
    return json.dumps({"packages": entries})


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def a_node(name: str = "n1", labels: Mapping[str, str] | None = None, taints: Iterable[Mapping[str, str]] = (),
           state: str = "") -> NodeView:
    """A Node as target selection sees it (labels default to `pool=gpu`)."""
    return NodeView(name, dict(GPU if labels is None else labels), tuple(taints), state)


def targets(pending: Iterable[str] = (), done: Iterable[str] = (), *, paused: Iterable[str] = (),
            blocked: Mapping[str, str] | None = None, waiting: Mapping[str, str] | None = None,
            labels: Mapping[str, str] | None = None, fingerprint: str = "f0") -> NodeTargets:
    """One node's `NodeTargets` as a listing would report them."""
    return NodeTargets(pending=list(pending), done=list(done), paused=list(paused), blocked=dict(blocked or {}),
                       waiting=dict(waiting or {}), labels=dict(labels or {}), fingerprint=fingerprint)


def a_selection(**nodes: NodeTargets) -> FleetSelection:
    """A listing: node name -> its targets."""
    return FleetSelection(nodes=dict(nodes))


def everywhere(nodes: Iterable[str], pending: Iterable[str], fingerprint: str = "f0") -> FleetSelection:
    """A listing where every node of `nodes` has the same `pending` Packages."""
    return FleetSelection(nodes={n: targets(pending, fingerprint=fingerprint) for n in nodes})


def a_result(node: str, request_id: str, withdrawn: bool = False, *, cordoned: bool = False,
             drained: bool = False, interrupt: str = "", **outcomes: str) -> WindowResult:
    """A node workflow's answer: Package -> State value (complete, erroring, blocked, skipped)."""
    return WindowResult(node, request_id, {p: PackageOutcome(s, message=f"{p} {s}") for p, s in outcomes.items()},
                        withdrawn=withdrawn, cordoned=cordoned, drained=drained, interrupt=interrupt)


def every_node(report: Any, state: Any) -> Any:
    """A `progress` report with every node listed, as a client asking `ProgressFilter(all=True)` gets it."""
    from planning.views.fleet_status import NODES_PAGE_MAX, with_nodes
    from protocol.fleet import ProgressFilter

    return with_nodes(report, state, ProgressFilter(all=True, limit=NODES_PAGE_MAX))
