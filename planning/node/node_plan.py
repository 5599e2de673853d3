"""The per-node plan: what each package must do on one node, in which order, in its one window. Pure.

Input: the node's recorded state (`noderoll.io/state`), the desired Package specs that target the
node, and the names whose uninstall is requested. Output: a `NodePlan`.

Action per package (first rule that applies):
1. uninstall requested (`uninstall.enabled` + `uninstall.apply`, or the name is in `uninstall`):
   `uninstall` when the package is recorded on the node (an uninstall already under way continues
   at its recorded stage), else `none` (absent = uninstalled);
2. nothing recorded (or an unreadable recorded version): `install`;
3. desired version newer than recorded: `upgrade`; older: `downgrade`;
4. same version, same image, the recorded operation unfinished: it resumes at the recorded stage
   (re-run when not complete, else the next one); a resume point past its `config` stage goes back
   to `config` when the desired config is not the one it applies (`targetConfig`; unknown = not);
5. same version but another image: `install` (the image was rebuilt; apply it again);
6. same version, finished, config content differs from the recorded hashes: `config`;
7. otherwise `none`.

Finished (rule 4): the node window writes `complete` only when an operation finished, with the
config hashes it applied, so `complete` at a stage that can end the action's sequence (`config`,
`post-interrupt`) is finished even when the current spec's sequence is longer (a configInterrupt
matching a new change, an added interrupt). `complete` at `apply`, `upgrade` or the `interrupt`
of an install/upgrade/config, and any other state, is unfinished.

Stages per action (each stage is followed by its `-check`, the interrupt has none):
* install, downgrade: `apply`, `config`, then `interrupt`, `post-interrupt` when the package has an
  interrupt. A downgrade is installed fresh from `apply` (NodeWright does the same).
* upgrade: `upgrade`, `config`, then `interrupt`, `post-interrupt` when the package has an
  interrupt (NodeWright's sequence: `upgrade` replaces `apply`).
* config: `config`, then `interrupt`, `post-interrupt` only when a `configInterrupts` key or
  glob matches a changed key; the interrupt is the merge of the matching ones. A package-level
  interrupt alone does not fire on a config-only change (NodeWright semantics).
* uninstall: `uninstall`, then `interrupt` when the package has an interrupt.

The window: every package with work shares ONE window (ADR 0007): every package's stages before
the interrupt, then ONE merged interrupt (`api.interrupts`), then every post-interrupt stage, so a
change set costs one drain and one merged interrupt. Uninstalls go first (dependents before their
dependencies), then the others in dependency order; a dependent's stages before the interrupt see
its dependency's stages before the interrupt complete (its post-interrupt stages run after the
merged interrupt, before the dependent's). The window needs a drain when its merged interrupt is
disruptive (not `noop`).

Rerun (`noderoll rerun`, fleet windows only): a package named in `rerun` whose plan has no work
(recorded complete at the desired version, image and config) runs again: the install sequence
(`apply`, `config`, then `interrupt`, `post-interrupt` when it has an interrupt), from the given
stage of it on when one is named (`rerun_plan`); a stage that is not part of that sequence (the
interrupt of a package without one) runs nothing: the package is answered up to date, the message
says the rerun was skipped. A package that has work anyway gets its normal plan.

A dependency is satisfied on this node when it has work in this plan at the required version, or
is recorded complete there at that version with no work left; otherwise the dependent is
`blocked` with the reason (and left out of the windows).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from api.enums import PlanAction, Stage, State
from api.interrupts import InterruptRequest, merge_interrupts
from api.node_state import NodeState, PackageNodeState, changed_config_keys, config_hashes
from api.package import Interrupt, PackageSpec
from api.versions import VersionError, compare_versions, same_version
from planning.node.dependencies import DependencyCycleError, topological_order


@dataclass(frozen=True)
class NodePlanInput:
    """Everything the plan of one node depends on."""

    node: str
    recorded: NodeState
    # Package name -> desired spec, for every Package that targets this node.
    desired: Mapping[str, PackageSpec]
    # Names whose uninstall is requested besides `spec.uninstall.apply` (e.g. a deleted Package).
    uninstall: frozenset[str] = field(default_factory=frozenset)
    # Package name -> the stage a rerun starts at ("" = the whole install sequence); see the module rules.
    rerun: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StageStep:
    """One stage to run and the check that must pass after it (None for the interrupt)."""

    stage: Stage
    mode: str
    check: str | None


@dataclass(frozen=True)
class PackagePlan:
    """What one package does on the node."""

    name: str
    action: PlanAction
    version: str
    previous_version: str | None = None
    # Remaining stages in order; Stage.INTERRUPT marks where the window's merged interrupt runs.
    stages: tuple[Stage, ...] = ()
    interrupt: InterruptRequest | None = None
    changed_config: tuple[str, ...] = ()
    resumed: bool = False
    reason: str = ""
    blocked: str | None = None

    @property
    def has_work(self) -> bool:
        """True when there is at least one stage to run."""
        return bool(self.stages)

    @property
    def needs_interrupt(self) -> bool:
        """True when the interrupt is still ahead for this package."""
        return self.interrupt is not None and Stage.INTERRUPT in self.stages

    @property
    def needs_drain(self) -> bool:
        """True when this package's interrupt ahead disrupts workloads."""
        return self.needs_interrupt and self.interrupt is not None and self.interrupt.disruptive

    def steps_before_interrupt(self) -> tuple[StageStep, ...]:
        """Stages (with checks) that run before the window's interrupt."""
        if Stage.INTERRUPT not in self.stages:
            return _steps(self.stages)
        return _steps(self.stages[: self.stages.index(Stage.INTERRUPT)])

    def steps_after_interrupt(self) -> tuple[StageStep, ...]:
        """Stages (with checks) that run after the window's interrupt."""
        if Stage.INTERRUPT not in self.stages:
            return ()
        return _steps(self.stages[self.stages.index(Stage.INTERRUPT) + 1 :])


@dataclass(frozen=True)
class NodeWindow:
    """Packages that share one interrupt: stages before, one merged interrupt, stages after."""

    packages: tuple[str, ...]
    interrupt: InterruptRequest | None
    needs_drain: bool


@dataclass(frozen=True)
class NodePlan:
    """The plan of one node."""

    node: str
    packages: Mapping[str, PackagePlan]
    # None when no package has work (or the plan has an error).
    window: NodeWindow | None = None
    error: str | None = None

    @property
    def order(self) -> tuple[str, ...]:
        """Packages with work, in execution order."""
        return self.window.packages if self.window else ()

    @property
    def needs_drain(self) -> bool:
        """True when the window drains the node."""
        return self.window is not None and self.window.needs_drain

    @property
    def blocked(self) -> dict[str, str]:
        """Packages that cannot run on this node, with the reason."""
        return {n: p.blocked for n, p in self.packages.items() if p.blocked}


def _steps(stages: tuple[Stage, ...]) -> tuple[StageStep, ...]:
    return tuple(
        StageStep(stage=s, mode=s.value, check=None if s is Stage.INTERRUPT else s.check) for s in stages
    )


def _request(interrupt: Interrupt | None) -> InterruptRequest | None:
    if interrupt is None:
        return None
    return InterruptRequest(type=interrupt.type, services=tuple(sorted(set(interrupt.services))))


def stage_sequence(action: PlanAction, has_interrupt: bool) -> tuple[Stage, ...]:
    """The full stage sequence of an action (see module rules)."""
    tail = (Stage.INTERRUPT, Stage.POST_INTERRUPT) if has_interrupt else ()
    if action in (PlanAction.INSTALL, PlanAction.DOWNGRADE):
        return (Stage.APPLY, Stage.CONFIG, *tail)
    if action is PlanAction.UPGRADE:
        return (Stage.UPGRADE, Stage.CONFIG, *tail)
    if action is PlanAction.CONFIG:
        return (Stage.CONFIG, *tail)
    if action is PlanAction.UNINSTALL:
        return (Stage.UNINSTALL, Stage.INTERRUPT) if has_interrupt else (Stage.UNINSTALL,)
    return ()


def config_interrupt(spec: PackageSpec, changed: list[str]) -> InterruptRequest | None:
    """Merge of the `configInterrupts` whose key or glob matches a changed config key."""
    matching = [
        _request(intr)
        for pattern, intr in spec.config_interrupts.items()
        if any(fnmatch.fnmatchcase(key, pattern) for key in changed)
    ]
    return merge_interrupts(matching)


def _interrupt_for(action: PlanAction, spec: PackageSpec, changed: list[str]) -> InterruptRequest | None:
    return config_interrupt(spec, changed) if action is PlanAction.CONFIG else _request(spec.interrupt)


def _make(
    name: str, spec: PackageSpec, action: PlanAction, rec: PackageNodeState | None, reason: str
) -> PackagePlan:
    changed = _changed_keys(rec, spec, unfinished=False) if action is PlanAction.CONFIG else []
    interrupt = _interrupt_for(action, spec, changed)
    return PackagePlan(
        name=name,
        action=action,
        version=spec.version,
        previous_version=rec.version if rec else None,
        stages=stage_sequence(action, interrupt is not None),
        interrupt=interrupt,
        changed_config=tuple(changed),
        reason=reason,
    )


def _changed_keys(rec: PackageNodeState | None, spec: PackageSpec, unfinished: bool) -> list[str]:
    """Config keys a config operation changes: against the recorded hashes (the config before it)
    and, for an unfinished one, also against the config it was applying (a newer change joins it)."""
    if rec is None:
        return []
    changed = set(changed_config_keys(rec.config, spec.config))
    if unfinished and rec.target_config is not None:
        changed.update(changed_config_keys(rec.target_config, spec.config))
    return sorted(changed)


def _ends_sequence(action: PlanAction, stage: Stage | None) -> bool:
    """True when `stage` is the last stage of `action`'s sequence, with or without an interrupt."""
    return stage is not None and stage in {stage_sequence(action, False)[-1], stage_sequence(action, True)[-1]}


def _resume(name: str, spec: PackageSpec, rec: PackageNodeState) -> PackagePlan | None:
    """Continue an unfinished recorded operation, or None when the recorded one finished."""
    action = rec.action
    if action is None or action is PlanAction.NONE:
        if rec.state is State.COMPLETE:
            return None
        action = PlanAction.UPGRADE if rec.stage is Stage.UPGRADE else PlanAction.INSTALL
    if action is PlanAction.UNINSTALL:
        # The uninstall was cancelled (apply set back to false): install again, like NodeWright.
        return _make(name, spec, PlanAction.INSTALL, rec, "uninstall cancelled; installing again")
    if rec.state is State.COMPLETE and _ends_sequence(action, rec.stage):
        return None  # finished (module notes): a new desired config is a new config operation
    return _continue(name, spec, rec, action)


def _continue(name: str, spec: PackageSpec, rec: PackageNodeState, action: PlanAction) -> PackagePlan | None:
    """The stages of `action` left after the recorded stage (None when none are left)."""
    changed = _changed_keys(rec, spec, unfinished=True) if action is PlanAction.CONFIG else []
    interrupt = _interrupt_for(action, spec, changed)
    stages = stage_sequence(action, interrupt is not None)
    note = ""
    if rec.stage in stages:
        start = stages.index(rec.stage) + (1 if rec.state is State.COMPLETE else 0)
        # Past `config`, but not known to have applied the desired config: apply it (rule 4).
        stale = rec.target_config != config_hashes(spec.config)
        if Stage.CONFIG in stages[:start] and stale:
            start = stages.index(Stage.CONFIG)
            note = "; the desired config is not the one it applied"
        stages = stages[start:]
    if not stages:
        return None
    where = rec.stage.value if rec.stage else "start"
    reason = f"resuming {action.value} at {stages[0].value} (recorded {where}/{rec.state.value}{note})"
    return PackagePlan(
        name=name,
        action=action,
        version=spec.version,
        previous_version=rec.version,
        stages=stages,
        interrupt=interrupt,
        changed_config=tuple(changed),
        resumed=True,
        reason=reason,
    )


def plan_package(name: str, spec: PackageSpec, rec: PackageNodeState | None, uninstall: bool) -> PackagePlan:
    """The plan of one package on one node, ignoring dependencies (module rules 1-7)."""
    if uninstall or spec.uninstall_requested():
        if rec is None:
            return PackagePlan(
                name, PlanAction.NONE, spec.version, reason="uninstall requested; not installed"
            )
        if rec.action is PlanAction.UNINSTALL:
            # An uninstall already under way continues where it stopped (entry removal pending).
            left = _continue(name, spec, rec, PlanAction.UNINSTALL)
            return left or PackagePlan(
                name, PlanAction.NONE, spec.version, reason="uninstalled; entry removal pending"
            )
        return _make(name, spec, PlanAction.UNINSTALL, rec, "uninstall requested")
    if rec is None:
        return _make(name, spec, PlanAction.INSTALL, rec, "not installed")
    try:
        order = compare_versions(spec.version, rec.version)
    except VersionError:
        return _make(name, spec, PlanAction.INSTALL, rec, f"recorded version {rec.version!r} is unreadable")
    if order > 0:
        return _make(name, spec, PlanAction.UPGRADE, rec, f"upgrade from {rec.version}")
    if order < 0:
        return _make(name, spec, PlanAction.DOWNGRADE, rec, f"downgrade from {rec.version}")
    if rec.image and rec.image != spec.image:
        return _make(name, spec, PlanAction.INSTALL, rec, f"image changed from {rec.image}")
    resumed = _resume(name, spec, rec)
    if resumed is not None:
        return resumed
    if changed_config_keys(rec.config, spec.config):
        return _make(name, spec, PlanAction.CONFIG, rec, "config changed")
    return PackagePlan(name, PlanAction.NONE, spec.version, previous_version=rec.version, reason="up to date")


RERUN_STAGES = (Stage.APPLY, Stage.CONFIG, Stage.INTERRUPT, Stage.POST_INTERRUPT)


def rerun_plan(name: str, spec: PackageSpec, rec: PackageNodeState | None, stage: str) -> PackagePlan:
    """A forced plan: the install sequence again, from `stage` ("" = all of it); module rules."""
    interrupt = _request(spec.interrupt)
    stages = stage_sequence(PlanAction.INSTALL, interrupt is not None)
    previous = rec.version if rec else None
    if stage:
        if stage not in {s.value for s in stages}:
            shown = ", ".join(s.value for s in stages)
            return PackagePlan(name, PlanAction.NONE, spec.version, previous_version=previous,
                               reason=f"up to date; rerun from {stage} skipped: not a stage of this package ({shown})")
        stages = stages[[s.value for s in stages].index(stage):]
    return PackagePlan(name=name, action=PlanAction.INSTALL, version=spec.version, previous_version=previous,
                       stages=stages, interrupt=interrupt, reason=f"rerun from {stages[0].value}")


def _dependency_blocker(
    plan: PackagePlan, spec: PackageSpec, plans: Mapping[str, PackagePlan], recorded: NodeState
) -> str | None:
    for dep, version in sorted(spec.depends_on.items()):
        dep_plan = plans.get(dep)
        if dep_plan is not None and dep_plan.action is PlanAction.UNINSTALL:
            return f"dependency {dep} is being uninstalled"
        if dep_plan is not None and dep_plan.has_work:
            if compare_versions(dep_plan.version, version) != 0:
                return f"needs {dep} {version}, but {dep_plan.version} is being installed"
            continue
        installed = complete_version(recorded, dep)
        if installed is None:
            return f"needs {dep} {version}, which is not installed on this node"
        if not same_version(installed, version):
            return f"needs {dep} {version}, but {installed} is installed"
    return None


def complete_version(recorded: NodeState, package: str) -> str | None:
    """The version of `package` recorded complete on the node; None when it is absent or unfinished."""
    entry = recorded.packages.get(package)
    return entry.version if entry is not None and entry.is_complete() else None


def plan_node(data: NodePlanInput) -> NodePlan:
    """Plan every desired package on one node (see the module docstring for the rules)."""
    plans: dict[str, PackagePlan] = {
        name: plan_package(name, spec, data.recorded.packages.get(name), name in data.uninstall)
        for name, spec in sorted(data.desired.items())
    }
    for name, stage in sorted(data.rerun.items()):
        plan = plans.get(name)
        spec = data.desired.get(name)
        forced = spec is not None and name not in data.uninstall and not spec.uninstall_requested()
        if forced and plan is not None and plan.action is PlanAction.NONE and not plan.blocked:
            plans[name] = rerun_plan(name, data.desired[name], data.recorded.packages.get(name), stage)
    for name, plan in list(plans.items()):
        if plan.has_work and plan.action is not PlanAction.UNINSTALL:
            blocker = _dependency_blocker(plan, data.desired[name], plans, data.recorded)
            if blocker:
                plans[name] = replace(plan, stages=(), blocked=blocker)
    try:
        window = _window(data, plans)
    except DependencyCycleError as err:
        return NodePlan(node=data.node, packages=plans, error=str(err))
    return NodePlan(node=data.node, packages=plans, window=window)


def _window(data: NodePlanInput, plans: Mapping[str, PackagePlan]) -> NodeWindow | None:
    working = {n for n, p in plans.items() if p.has_work}
    if not working:
        return None
    uninstalls = {n for n in working if plans[n].action is PlanAction.UNINSTALL}
    installs = working - uninstalls
    order = topological_order({n: [d for d in data.desired[n].depends_on if d in installs] for n in installs})
    # Uninstall dependents before their dependencies: reverse dependency order.
    uninstall_order = list(
        reversed(topological_order({n: list(data.desired[n].depends_on) for n in uninstalls}))
    )
    members = [*uninstall_order, *order]
    interrupt = merge_interrupts(plans[n].interrupt for n in members if plans[n].needs_interrupt)
    return NodeWindow(packages=tuple(members), interrupt=interrupt, needs_drain=bool(interrupt and interrupt.disruptive))
