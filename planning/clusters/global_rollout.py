"""The promotion of one policy's changes across clusters: what `global/<policy>` decides. Pure.

State (`GlobalState`, carried through continue-as-new as JSON): every cluster's copy of the policy's
`spec.clusters` and the copy the promotion runs (`adopted`), the fleet of each cluster, one
`ChangeRollout` per change set (the latest few), and the promotion's pause and halt.

Rules (ADR 0017):
* Which `spec.clusters`: the first copy reported is adopted; a different copy is adopted only once
  every cluster that reported agrees on it (an edit applied everywhere). A cluster whose copy differs
  from the adopted one, or that no stage names, is `held` and told why.
* Stages: the first report of a change grants its stage 0. Stage n+1 is granted once every cluster
  of stages 0..n is `complete` for that change and `soakSeconds` passed since that was first true
  (`soak_until`). A cluster may roll a change out (its turn) when its stage is granted for it, the
  promotion is neither paused nor halted, and it is not held. Turns are idempotent: a cluster that
  asks again for a change its stage was granted is granted again.
* A `failed` report halts the promotion with `onFailure: haltAll` (the workflow halts every fleet);
  with `holdPromotion` its stage simply never completes. `resume` clears a halt and a pause; a
  failed cluster stays failed until it reports again (its own `retry` and a `complete`).
* A fleet that ended (its last Package went: deleted, or moved to another policy; or its policy dropped
  `spec.clusters`) says so (`ended`); its copy of `spec.clusters` no longer counts, and it holds no later
  stage: its stage completes without it (`ended_release`; runs recorded before the rule keep waiting). The promotion is `finished` once every
  cluster of the adopted stages, and every other cluster that reported, has ended: nothing is left
  to promote. A staged cluster never heard from keeps it open: its fleet may still come and need
  what the earlier stages did (their `complete`). A later report starts a new promotion (a new run)
  at stage 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import ValidationError

from api.clusters import ClusterFailure, ClustersSpec, ClusterState
from api.enums import RolloutPhase
from protocol.clusters import ClusterReport, ClusterView, GlobalTurn, GlobalView

# Change sets remembered (oldest dropped): a fleet asking for an older one starts it again at stage 0.
KEPT_CHANGES = 8


@dataclass
class ChangeRollout:
    """One change set's promotion."""

    change: str
    summary: str = ""
    # Highest stage granted (0 once the change is first reported).
    stage: int = 0
    # Cluster -> api.clusters.ClusterState value, and the message of its last report.
    states: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    # RFC 3339 end of the soak after stage `stage` completed ("" = not soaking).
    soak_until: str = ""


@dataclass
class GlobalState:
    """Everything `global/<policy>` holds (module docstring)."""

    policy: str = ""
    # Cluster -> its copy of spec.clusters (JSON by alias; None: its policy has none).
    copies: dict[str, dict[str, object] | None] = field(default_factory=dict)
    adopted: dict[str, object] | None = None
    adopted_from: str = ""
    # Cluster -> its fleet's workflow id, and the change it last reported.
    fleets: dict[str, str] = field(default_factory=dict)
    asked: dict[str, str] = field(default_factory=dict)
    changes: list[ChangeRollout] = field(default_factory=list)
    halted: str = ""
    paused: bool = False
    # Clusters whose fleet ended (sorted); a later report of theirs takes them off.
    ended: list[str] = field(default_factory=list)
    # A cluster whose fleet ended holds no stage after its own (runs recorded before the rule: False).
    ended_release: bool = False


def spec_of(state: GlobalState) -> ClustersSpec | None:
    """The adopted spec.clusters (None before any report, or when the adopted copy does not validate)."""
    if state.adopted is None:
        return None
    try:
        return ClustersSpec.model_validate(state.adopted)
    except ValidationError:
        return None


def change_of(state: GlobalState, change: str) -> ChangeRollout | None:
    """The promotion of `change`, None when it is not remembered."""
    return next((c for c in state.changes if c.change == change), None)


def _adopt(state: GlobalState) -> None:
    copies = list(state.copies.values())
    if state.adopted is None and copies:
        state.adopted, state.adopted_from = copies[0], next(iter(state.copies))
        return
    if copies and all(c == copies[0] for c in copies) and copies[0] != state.adopted:
        state.adopted, state.adopted_from = copies[0], "every cluster"


def held_reason(state: GlobalState, cluster: str) -> str:
    """Why `cluster` may not take part now ("" when it may)."""
    spec = spec_of(state)
    if cluster in state.copies and state.copies[cluster] != state.adopted:
        return (f"cluster {cluster}'s spec.clusters of DeploymentPolicy {state.policy} differs from the one "
                f"global/{state.policy} runs (adopted from {state.adopted_from}: {state.adopted}); "
                "apply the same spec.clusters in every cluster")
    if spec is None:
        return f"global/{state.policy} has no valid spec.clusters (adopted from {state.adopted_from})"
    if spec.stage_of(cluster) is None:
        return f"cluster {cluster} is in no stage of spec.clusters of DeploymentPolicy {state.policy}"
    return ""


def unheard(state: GlobalState) -> list[str]:
    """Clusters of the adopted stages that never reported to this global state (their fleets are asked
    to report again: a global workflow whose state was lost, say terminated, hears them again)."""
    spec = spec_of(state)
    return [c for stage in (spec.stages if spec else []) for c in stage if c not in state.fleets]


def record_report(state: GlobalState, report: ClusterReport) -> bool:
    """Take one cluster's report; True when it halts the promotion (a failure under `haltAll`)."""
    state.fleets[report.cluster] = report.fleet_workflow_id
    if report.ended:
        state.ended = sorted({*state.ended, report.cluster})
        state.copies.pop(report.cluster, None)
    else:
        state.ended = [c for c in state.ended if c != report.cluster]
        state.copies[report.cluster] = report.clusters
    _adopt(state)
    if report.ended or not report.change:
        return False
    state.asked[report.cluster] = report.change
    rollout = change_of(state, report.change)
    if rollout is None:
        rollout = ChangeRollout(change=report.change, summary=report.summary)
        state.changes = [*state.changes, rollout][-KEPT_CHANGES:]
    if held_reason(state, report.cluster):
        rollout.states[report.cluster] = ClusterState.HELD.value
        return False
    rollout.states[report.cluster] = report.state
    rollout.messages[report.cluster] = report.message
    spec = spec_of(state)
    if report.state == ClusterState.FAILED.value and spec is not None and not state.halted \
            and spec.on_failure is ClusterFailure.HALT_ALL:
        state.halted = f"cluster {report.cluster} failed change {report.change}: {report.message or 'failed'}"
        return True
    return False


def finished(state: GlobalState) -> bool:
    """Every cluster of the adopted stages, and every other that reported, has ended (module docstring)."""
    spec = spec_of(state)
    staged = {c for stage in (spec.stages if spec else []) for c in stage}
    return bool(state.fleets) and {*staged, *state.fleets} <= set(state.ended)


def live_fleets(state: GlobalState) -> list[tuple[str, str]]:
    """(cluster, fleet workflow id) of every fleet that has not ended, by cluster: the ones to answer."""
    return [(c, f) for c, f in sorted(state.fleets.items()) if c not in state.ended]


def _stage_complete(state: GlobalState, spec: ClustersSpec, rollout: ChangeRollout, stage: int) -> bool:
    """Every cluster of `stage` is complete for the change, or has left the promotion (its fleet ended)."""
    left = set(state.ended) if state.ended_release else set()
    return all(rollout.states.get(c) == ClusterState.COMPLETE.value or c in left for c in spec.stages[stage])


def advance(state: GlobalState, now: datetime) -> datetime | None:
    """Grant the next stages of every change whose granted stages completed and soaked; the earliest
    time a soak ends (when the caller should look again), None when no soak runs."""
    spec = spec_of(state)
    if spec is None or state.halted or state.paused:
        return None
    wake: datetime | None = None
    for rollout in state.changes:
        while rollout.stage < len(spec.stages) - 1:
            if not all(_stage_complete(state, spec, rollout, s) for s in range(rollout.stage + 1)):
                rollout.soak_until = ""  # a cluster went back to work: the soak starts again when it is done
                break
            if not rollout.soak_until:
                rollout.soak_until = (now + timedelta(seconds=spec.soak_seconds)).isoformat()
            until = datetime.fromisoformat(rollout.soak_until)
            if now < until:
                wake = until if wake is None else min(wake, until)
                break
            rollout.stage += 1
            rollout.soak_until = ""
    return wake


def granted(state: GlobalState, cluster: str, change: str) -> bool:
    """May `cluster` roll `change` out now (module docstring)?"""
    spec = spec_of(state)
    rollout = change_of(state, change)
    if spec is None or rollout is None or state.halted or state.paused or held_reason(state, cluster):
        return False
    stage = spec.stage_of(cluster)
    return stage is not None and stage <= rollout.stage


def turn_for(state: GlobalState, cluster: str, now: datetime) -> GlobalTurn:
    """The answer to `cluster`'s fleet: its turn for the change it last reported, and the view."""
    change = state.asked.get(cluster, "")
    view = global_view(state, now)
    ok = granted(state, cluster, change)
    why = held_reason(state, cluster)
    if ok:
        message = f"global/{state.policy} granted stage {view.stage + 1} of {len(view.stages)}"
    elif why:
        message = f"held by global/{state.policy}: {why}"
    elif state.halted:
        message = f"global/{state.policy} is halted: {state.halted}; signal resume on global/{state.policy}"
    elif state.paused:
        message = f"global/{state.policy} is paused; signal resume on global/{state.policy}"
    else:
        message = f"waiting for its turn in global/{state.policy}: {view.message}"
    return GlobalTurn(change=change, granted=ok, message=message, view=view)


def _phase(state: GlobalState, spec: ClustersSpec | None, rollout: ChangeRollout | None) -> RolloutPhase:
    if state.halted:
        return RolloutPhase.HALTED
    if state.paused:
        return RolloutPhase.PAUSED
    if spec is None or rollout is None:
        return RolloutPhase.PENDING
    if all(_stage_complete(state, spec, rollout, s) for s in range(len(spec.stages))):
        return RolloutPhase.COMPLETE
    if rollout.soak_until:
        return RolloutPhase.WAITING
    return RolloutPhase.PROGRESSING


def _message(state: GlobalState, spec: ClustersSpec | None, rollout: ChangeRollout | None,
             phase: RolloutPhase) -> str:
    if phase is RolloutPhase.HALTED:
        return f"halted: {state.halted}"
    if spec is None or rollout is None:
        return "no change reported yet"
    stage = rollout.stage
    names = ", ".join(spec.stages[stage])
    if phase is RolloutPhase.COMPLETE:
        return f"change {rollout.change} complete in every stage"
    if rollout.soak_until:
        return f"stage {stage + 1} ({names}) complete; soaking until {rollout.soak_until}"
    left = set(state.ended) if state.ended_release else set()
    waiting = [c for c in spec.stages[stage] if rollout.states.get(c) != ClusterState.COMPLETE.value and c not in left]
    return f"stage {stage + 1} of {len(spec.stages)} ({names}): waiting for {', '.join(waiting)}"


def global_view(state: GlobalState, now: datetime) -> GlobalView:
    """What `progress` answers and every fleet shows: the latest change's stage and every cluster."""
    spec = spec_of(state)
    rollout = state.changes[-1] if state.changes else None
    phase = _phase(state, spec, rollout)
    stages = [list(s) for s in spec.stages] if spec else []
    known = [c for s in stages for c in s] + sorted(set(state.fleets) - {c for s in stages for c in s})
    clusters = []
    for cluster in known:
        stage = spec.stage_of(cluster) if spec else None
        value = ClusterState.UNKNOWN.value
        message = ""
        if rollout is not None:
            value = rollout.states.get(cluster, value)
            message = rollout.messages.get(cluster, "")
        if held_reason(state, cluster) and cluster in state.fleets:
            value, message = ClusterState.HELD.value, held_reason(state, cluster)
        elif value == ClusterState.WAITING.value and rollout is not None and granted(state, cluster, rollout.change):
            value = ClusterState.RUNNING.value
        clusters.append(ClusterView(cluster=cluster, stage=-1 if stage is None else stage, state=value,
                                    change=state.asked.get(cluster, ""), message=message))
    return GlobalView(
        policy=state.policy, change=rollout.change if rollout else "", summary=rollout.summary if rollout else "",
        stage=rollout.stage if rollout else -1, stages=stages, phase=phase.value,
        soak_until=rollout.soak_until if rollout else "", halted=state.halted, paused=state.paused,
        clusters=clusters, message=_message(state, spec, rollout, phase), updated_at=now.isoformat(),
    )
