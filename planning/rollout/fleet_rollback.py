"""Automatic rollback of a failed canary (`canary.onFailure: rollback`, ADR 0009). Pure (no I/O, deterministic).

A fleet's wave rolls out a change set: the Packages whose spec changed (`FleetState.changed`). With
`canary.onFailure: rollback` on the DeploymentPolicy, a failed canary (any canary node whose window
ended with a Package erroring) does not just halt the fleet:

* what the wave goes back to is decided when the wave starts (`previous_specs`): per changed Package
  the spec of the last wave whose canary passed for it (its *stable* spec: a wave without a canary
  passes trivially), or none when the Package was new (it is uninstalled). A wave that ends without
  its canary passing (rolled back, halted or superseded by a newer desired state) leaves the stable
  spec where it was, and the Packages it changed count as changed in the next wave again (its canary
  covers them, even when only the policy changed since); `unproven` says which;
* the canary nodes whose canary window ran a changed Package (`complete` or `erroring`; a Package
  answered `blocked` did not run) each get ONE rollback window (`plan`): a `WindowRequest` whose
  `PackageOrder`s carry the previous spec of every changed Package that window ran (the node plan
  downgrades from the recorded version, erroring or not, as a fresh install from `apply`, or redoes
  `config` with the previous config) or `uninstall` with the new spec for a Package that was new (its
  image knows how to remove itself): one drain and one merged interrupt, like any window. Nodes
  outside the canary are never touched; a changed Package without a known previous spec (a fleet
  carried over from a release before this one) makes the fleet halt as with `halt`, saying why;
* the rollback is not held by pauses, maintenance windows or analysis gates (it is the way back to
  a known state); `halt` withdraws its requests not yet started, like any request;
* each node's answer ends its rollback (`answered`): every Package `complete` (downgraded,
  reconfigured or uninstalled) is rolled back; anything else is a failed rollback (`failed`, with the
  reason; the node stays erroring); a withdrawal leaves the node to be asked again. Once every node
  answered the wave ends `RolledBack` (nothing failed) or `Halted` with both reasons;
* afterwards the fleet waits: a new desired state (a fixed spec) starts a new wave, canary first; the
  same desired state sent again changes nothing; `resume` (without a filter) re-attempts the wave
  (a new wave with the same desired state, canary first); `retry` asks the nodes whose rollback
  failed (all, or the filtered ones) again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.enums import CanaryPhase, RolloutPhase, State
from protocol.fleet import PackageEntry, PackageOrder, WindowResult

# A reason quoted from a node's answer is cut to this many characters.
REASON_CHARS = 200
# Outcomes of a canary window that mean the Package ran there (and must be rolled back).
RAN = (State.COMPLETE.value, State.ERRORING.value)


@dataclass
class Rollback:
    """The rollback of one wave's canary (kept in `FleetState.rollback`)."""

    wave: int
    # Why: the canary nodes that failed and their reasons, as one line.
    reason: str
    # Canary node -> why its canary window failed.
    failures: dict[str, str] = field(default_factory=dict)
    # Node -> the Packages its rollback window carries (the changed Packages its canary window ran).
    nodes: dict[str, list[str]] = field(default_factory=dict)
    # Package -> the order that rolls it back (the previous spec, or `uninstall` with the new one).
    orders: dict[str, PackageOrder] = field(default_factory=dict)
    # Package -> the version it goes back to ("" = uninstalled).
    versions: dict[str, str] = field(default_factory=dict)
    # Nodes whose rollback window answered every Package complete, and those where it failed (why).
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class RollbackReport:
    """A rollback as the fleet's `progress` shows it (no specs)."""

    wave: int = 0
    # RollingBack, RolledBack, or Halted (the rollback failed on a node).
    phase: RolloutPhase = RolloutPhase.ROLLING_BACK
    reason: str = ""
    failures: dict[str, str] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    # Package -> the version it goes back to; the Packages uninstalled (they were new).
    versions: dict[str, str] = field(default_factory=dict)
    uninstalled: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RollbackInput:
    """What the rollback of a failed canary is planned from (the fleet's state after the canary)."""

    wave: int
    canary: Sequence[str]
    # Packages the wave changes, and per changed Package its previous spec (None: it was new).
    changed: Sequence[str]
    previous: Mapping[str, PackageEntry | None]
    # The desired state now (the uninstall of a new Package runs with its spec).
    entries: Mapping[str, PackageEntry]
    # Node -> Package -> outcome (api.enums.State value) and message of this wave's windows.
    outcomes: Mapping[str, Mapping[str, str]]
    messages: Mapping[str, Mapping[str, str]]


# --- what a wave goes back to ---------------------------------------------------------------------


def canary_passed(phase: CanaryPhase, canary_count: int) -> bool:
    """True when a wave's canary passed (a wave without a canary passes trivially)."""
    return canary_count == 0 or phase in (CanaryPhase.SOAKING, CanaryPhase.AWAITING_PROMOTION, CanaryPhase.PASSED)


def unproven(changed: Collection[str], passed: bool) -> set[str]:
    """The Packages a wave changed whose canary did not pass: still changed in the next wave."""
    return set() if passed else set(changed)


@dataclass(frozen=True)
class PreviousInput:
    """What the previous specs of a new wave are decided from (module rules)."""

    changed: Collection[str]
    # The ending wave: its previous specs, the Packages it left unproven, the revisions it rolled out.
    previous: Mapping[str, PackageEntry | None]
    unproven: Collection[str]
    known: Collection[str]
    # Specs the ending wave rolled out that the desired state has since replaced.
    outgoing: Mapping[str, PackageEntry]


def previous_specs(data: PreviousInput) -> dict[str, PackageEntry | None]:
    """Per changed Package of a new wave: the spec a rollback restores (None: new; absent: unknown)."""
    found: dict[str, PackageEntry | None] = {}
    for package in sorted(data.changed):
        if package in data.unproven and package in data.previous:
            found[package] = data.previous[package]  # still the last stable spec
        elif package in data.outgoing:
            found[package] = data.outgoing[package]
        elif package not in data.known:
            found[package] = None
    return found


# --- planning the rollback --------------------------------------------------------------------------


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def _failures(data: RollbackInput) -> dict[str, str]:
    found = {}
    for node in sorted(data.canary):
        outcomes, messages = data.outcomes.get(node, {}), data.messages.get(node, {})
        bad = [f"{p}: {_cut(messages.get(p, '')) or 'erroring'}" for p, s in sorted(outcomes.items())
               if s == State.ERRORING.value]
        if bad:
            found[node] = "; ".join(bad)
    return found


def describe_failures(failures: Mapping[str, str]) -> str:
    """`canary failed on n01 (a: apply failed: exit 7); n02 (...)`."""
    return "canary failed on " + "; ".join(f"{node} ({why})" for node, why in sorted(failures.items()))


def plan(data: RollbackInput) -> Rollback | str:
    """The rollback of a failed canary (module rules), or why there can be none."""
    failures = _failures(data)
    rollback = Rollback(wave=data.wave, reason=describe_failures(failures), failures=failures)
    unknown = sorted(p for p in data.changed if p not in data.previous)
    for node in sorted(data.canary):
        outcomes = data.outcomes.get(node, {})
        ran = sorted(p for p in data.changed if outcomes.get(p) in RAN)
        if ran:
            rollback.nodes[node] = ran
    carried = sorted({p for packages in rollback.nodes.values() for p in packages})
    missing = [p for p in carried if p in unknown]
    if missing:
        return (f"the spec before wave {data.wave} of {', '.join(missing)} is unknown (the fleet ran it before "
                "noderoll kept previous specs); roll back by applying the previous spec")
    for package in carried:
        before = data.previous[package]
        if before is not None:
            rollback.orders[package] = PackageOrder(package, before.spec, before.generation)
            rollback.versions[package] = str(before.spec.get("version", ""))
        elif package in data.entries:
            entry = data.entries[package]
            rollback.orders[package] = PackageOrder(package, entry.spec, entry.generation, uninstall=True)
            rollback.versions[package] = ""
        else:
            return f"{package} was new in wave {data.wave} and is no longer in the desired state"
    return rollback


# --- running it ------------------------------------------------------------------------------------


def pending(rollback: Rollback) -> list[str]:
    """Nodes whose rollback has not answered (not sent, withdrawn, or in flight)."""
    return sorted(n for n in rollback.nodes if n not in rollback.done and n not in rollback.failed)


def finished(rollback: Rollback) -> bool:
    """True once every node's rollback window answered."""
    return not pending(rollback)


def orders_for(rollback: Rollback, node: str) -> list[PackageOrder]:
    """The orders of `node`'s rollback window."""
    return [rollback.orders[p] for p in rollback.nodes.get(node, []) if p in rollback.orders]


def answered(rollback: Rollback, result: WindowResult) -> None:
    """A node answered its rollback window (a withdrawal leaves it pending)."""
    node = result.node
    if result.withdrawn or node not in rollback.nodes:
        return
    bad = []
    for package in rollback.nodes[node]:
        outcome = result.outcomes.get(package)
        if outcome is None or outcome.state != State.COMPLETE.value:
            state = outcome.state if outcome is not None else "no answer"
            bad.append(f"{package}: {_cut(outcome.message) if outcome is not None and outcome.message else state}")
    if bad:
        rollback.failed[node] = "; ".join(bad)
    elif node not in rollback.done:
        rollback.done.append(node)
        rollback.done.sort()


def lost(rollback: Rollback, node: str, message: str) -> None:
    """`node`'s node workflow kept closing without answering its rollback window."""
    if node in rollback.nodes and node not in rollback.done:
        rollback.failed[node] = _cut(message)


def retry(rollback: Rollback, nodes: Collection[str]) -> list[str]:
    """`retry`: the failed rollbacks (of `nodes`; empty: all) are asked again. Returns those nodes."""
    again = sorted(n for n in rollback.failed if not nodes or n in nodes)
    for node in again:
        del rollback.failed[node]
    return again


# --- what it shows ---------------------------------------------------------------------------------


def phase(rollback: Rollback) -> RolloutPhase:
    """RollingBack while nodes have not answered, then RolledBack, or Halted when a rollback failed."""
    if not finished(rollback):
        return RolloutPhase.ROLLING_BACK
    return RolloutPhase.HALTED if rollback.failed else RolloutPhase.ROLLED_BACK


def _targets(rollback: Rollback) -> str:
    return ", ".join(f"{p} {v}" if v else f"{p} uninstalled" for p, v in sorted(rollback.versions.items()))


def message(rollback: Rollback, halted: bool = False) -> str:
    """The fleet's message for its rollback now (`halted`: the operator halted it)."""
    nodes = ", ".join(sorted(rollback.nodes))
    if halted and not finished(rollback):
        return (f"halted while rolling back wave {rollback.wave} ({rollback.reason}); {', '.join(pending(rollback))} "
                "not rolled back yet; signal retry to go on with the rollback or resume to re-attempt the wave")
    if not finished(rollback):
        return f"rolling back wave {rollback.wave} on {nodes} ({_targets(rollback)}): {rollback.reason}"
    if rollback.failed:
        failed = "; ".join(f"{n} ({why})" for n, why in sorted(rollback.failed.items()))
        return (f"halted: rollback of wave {rollback.wave} failed on {failed}, after: {rollback.reason}; "
                "signal retry to roll back again or resume to re-attempt the wave")
    return (f"wave {rollback.wave} rolled back: {rollback.reason}; {nodes} back at {_targets(rollback)}; "
            "apply a fixed spec (a new wave) or signal resume to re-attempt the wave")


def node_reason(rollback: Rollback, node: str, package: str) -> str:
    """Why `package` on `node` is not at the desired spec after its rollback window answered."""
    version = rollback.versions.get(package, "")
    back = f"rolled back to {version}" if version else "rolled back (uninstalled)"
    if node in rollback.failures:
        return f"{back}: the canary of wave {rollback.wave} failed here"
    return f"{back} with the failed canary of wave {rollback.wave}"


def report(rollback: Rollback, halted: bool = False) -> RollbackReport:
    """The rollback as `progress` shows it."""
    shown = RolloutPhase.HALTED if halted and not finished(rollback) else phase(rollback)
    return RollbackReport(wave=rollback.wave, phase=shown, reason=rollback.reason, failures=dict(rollback.failures),
                          nodes=sorted(rollback.nodes), versions={p: v for p, v in rollback.versions.items() if v},
                          uninstalled=sorted(p for p, v in rollback.versions.items() if not v),
                          failed=dict(rollback.failed))


def rollback_event(shown: Mapping[str, Any] | None, now: RollbackReport | None) -> str:
    """The message of the `CanaryRolledBack` Event to emit ("" = none): a finished rollback (RolledBack, or
    Halted when it failed) that the status `shown` (its `rollback`, CRD JSON) does not show yet."""
    if now is None or now.phase is RolloutPhase.ROLLING_BACK or (now.phase is RolloutPhase.HALTED and not now.failed):
        return ""  # still going, or halted by the operator before it ended
    shown = shown or {}
    if shown.get("wave") == now.wave and shown.get("phase") == now.phase.value:
        return ""
    if now.phase is RolloutPhase.ROLLED_BACK:
        return f"wave {now.wave} rolled back on {', '.join(now.nodes)}: {now.reason}"
    failed = "; ".join(f"{n} ({why})" for n, why in sorted(now.failed.items()))
    return f"rollback of wave {now.wave} failed on {failed}, after: {now.reason}"
