"""Target selection of a Package rollout. Pure (no I/O).

`select_targets(TargetQuery)` turns a snapshot of the fleet's Nodes into the rollout's targets:
* a node is a candidate when the Package's `nodeSelector` matches its labels (no selector: every
  node); a node labelled `noderoll.io/ignore=true` is left out entirely (not counted);
* with `hold_malformed` (the default), a candidate whose `noderoll.io/state` cannot be read is
  `blocked` with `api.node_state.held_reason`, whatever else it records or carries: no window may
  overwrite the annotation, and a node that was complete is no longer counted done (an uninstall,
  where the record decides, holds the nodes the selector matches). A node with a window
  `in_flight` is the exception: that window writes the node's state next anyway;
* a candidate with a `NoSchedule`/`NoExecute` taint the package does not tolerate is `blocked`
  with the reason (the taint), and retried at the next listing. Tolerated are: the package's
  `additionalTolerations`, the cordon taint `node.kubernetes.io/unschedulable` (noderoll cordons
  itself) and, for `runtimeRequired` packages, `noderoll.io/runtime-required`;
* a candidate whose recorded state already satisfies the spec (the per-node plan has no work
  for this package) is `done`, whatever its taints: a restarted or re-planned rollout does not lose work already done;
* a candidate with a window `in_flight` for this package stays eligible whatever its taints or
  dependencies: the window itself cordons and reboots it (the not-ready taint of a reboot is ours);
  its node workflow answers when the window ends, and only then is the node finished;
* with `check_dependencies`, a candidate with work to do where a `dependsOn` package is not recorded
  complete at the required version is `waiting` (the reason names the dependency): it is not
  requested (a request would sit queued on the node and hold its batch) until the dependency is
  complete there, which the rollout sees at its next listing;
* for an uninstall, the targets are the nodes where the package is recorded, whatever the selector.

Which nodes carry the runtime-required taint is `planning.runtime_taint`'s decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from api import keys
from api.node_state import NodeState, held_reason, parse_node_state
from api.package import PackageSpec, Toleration
from api.versions import same_version
from planning.compartments import NodeInfo
from planning.node_plan import complete_version, plan_package

UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class NodeView:
    """One Node as target selection sees it (built from an activity's snapshot)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # Each taint as {"key", "value", "effect"}.
    taints: Sequence[Mapping[str, str]] = ()
    state_annotation: str = ""
    # The `noderoll.io/status` label ("" when absent) and whether the condition
    # `noderoll.io/StateMalformed` is True: what the node shows now (planning/node_marks.py).
    status_label: str = ""
    state_malformed: bool = False


@dataclass(frozen=True)
class TargetQuery:
    """Which nodes a package should reach, and how."""

    package: str
    spec: PackageSpec
    nodes: Sequence[NodeView]
    uninstall: bool = False
    # Nodes with a request of this rollout in flight (see the module rules).
    in_flight: frozenset[str] = frozenset()
    check_dependencies: bool = False
    # Hold nodes whose state annotation cannot be read (False only for rollouts recorded before it).
    hold_malformed: bool = True


@dataclass
class TargetSelection:
    """Eligible nodes (with labels, for compartments), nodes already done, blocked and waiting nodes."""

    eligible: list[NodeInfo] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    # node -> why it cannot be targeted now (untolerated taints).
    blocked: dict[str, str] = field(default_factory=dict)
    # node -> the dependency it waits for (not complete there yet).
    waiting: dict[str, str] = field(default_factory=dict)


def tolerates(toleration: Toleration, taint: Mapping[str, str]) -> bool:
    """Kubernetes toleration semantics: key (empty + Exists: any), operator, value, effect."""
    if toleration.effect and toleration.effect != taint.get("effect"):
        return False
    if not toleration.key:
        return toleration.operator == "Exists"
    if toleration.key != taint.get("key"):
        return False
    return toleration.operator == "Exists" or (toleration.value or "") == (taint.get("value") or "")


def untolerated_taints(spec: PackageSpec, taints: Sequence[Mapping[str, str]]) -> list[str]:
    """The node's blocking taints the package does not tolerate, as `key=value:effect` strings."""
    implicit = [Toleration(key=UNSCHEDULABLE_TAINT_KEY, operator="Exists")]
    if spec.runtime_required:
        implicit.append(Toleration(key=keys.RUNTIME_REQUIRED_TAINT_KEY, operator="Exists"))
    tolerations = [*spec.additional_tolerations, *implicit]
    bad = []
    for taint in taints:
        if taint.get("effect") not in _BLOCKING_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            value = f"={taint.get('value')}" if taint.get("value") else ""
            bad.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return bad


def is_candidate(spec: PackageSpec, labels: Mapping[str, str]) -> bool:
    """The package's nodeSelector matches and the node is not ignored."""
    if labels.get(keys.NODE_IGNORE_LABEL) == "true":
        return False
    return spec.node_selector is None or spec.node_selector.matches(labels)


def needs_work(package: str, spec: PackageSpec, recorded: NodeState, uninstall: bool) -> bool:
    """True when the per-node plan has stages to run for `package` on a node with `recorded`."""
    plan = plan_package(package, spec, recorded.packages.get(package), uninstall or spec.uninstall_requested())
    return plan.has_work


def dependency_blocker(spec: PackageSpec, recorded: NodeState) -> str | None:
    """Why `spec` cannot run on a node with `recorded` yet: a `dependsOn` entry not complete there."""
    for dep, version in sorted(spec.depends_on.items()):
        installed = complete_version(recorded, dep)
        if installed is None:
            return f"waits for dependency {dep} {version} (not complete on this node)"
        if not same_version(installed, version):
            return f"waits for dependency {dep} {version} ({installed} is installed)"
    return None


def select_targets(query: TargetQuery) -> TargetSelection:
    """Split the fleet snapshot into eligible, done, blocked and waiting nodes (module rules)."""
    selection = TargetSelection()
    for node in sorted(query.nodes, key=lambda n: n.name):
        recorded, problem = parse_node_state(node.state_annotation)
        if problem and query.hold_malformed and node.name not in query.in_flight:
            # What is recorded is unknown: neither done nor safe to run (a window would overwrite it).
            if is_candidate(query.spec, node.labels):
                selection.blocked[node.name] = held_reason(problem)
            continue
        if query.uninstall:
            if query.package not in recorded.packages:
                continue
        elif not is_candidate(query.spec, node.labels):
            continue
        done = not needs_work(query.package, query.spec, recorded, query.uninstall)
        # Done is decided before taints: a node where this package is already complete is not
        # "blocked" because another package is rebooting it (transient not-ready taints).
        ours = done or node.name in query.in_flight
        bad = [] if ours else untolerated_taints(query.spec, node.taints)
        if bad:
            selection.blocked[node.name] = f"taints not tolerated: {', '.join(bad)}"
            continue
        waits = None
        if query.check_dependencies and not ours and not query.uninstall:
            waits = dependency_blocker(query.spec, recorded)
        if waits:
            selection.waiting[node.name] = waits
            continue
        selection.eligible.append(NodeInfo(node.name, dict(node.labels)))
        if done:
            selection.done.append(node.name)
    return selection

