"""A cluster's fleet in the promotion across clusters: its change set, its report, its turn. Pure.

A fleet of a named cluster whose policy has `spec.clusters` (ADR 0017) starts no wave for a change
set before `global/<policy>` granted it its turn (`ClusterTurns.granted`), and reports to the global
workflow whenever what it would say changes (`next_report`): the change set and its state
(`waiting` before the turn, `running`, then `complete` or `failed`) and its copy of the policy's
`spec.clusters`. The change set is every Package's revision (`planning.rollout.fleet_state.package_revision`:
the spec without `paused`, and uninstall), never generations or uids, so the same Packages applied
to every cluster are one change set everywhere. The last view of the global workflow is kept for
the fleet's `progress` (and so for every Package's and the policy's status).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from api.clusters import ClustersSpec, ClusterState
from api.enums import RolloutPhase
from protocol.clusters import ClusterReport, GlobalTurn, GlobalView
from protocol.fleet import FleetSpec

NO_CLUSTER = ("the policy's spec.clusters promotes changes cluster by cluster, but this cluster's worker and "
              "bridge run without a cluster name (--cluster): no stage names it; held")


@dataclass
class ClusterTurns:
    """What a fleet carries of the promotion (in `FleetState.turns`)."""

    # The change set `global/<policy>` granted this cluster ("" = none yet).
    granted: str = ""
    # The last report sent (its `report_key`), so an unchanged one is not sent again, and its state.
    sent: str = ""
    state: str = ""
    # The global workflow's last answer: its message and view.
    message: str = ""
    view: GlobalView | None = None


def change_id(revisions: dict[str, str]) -> str:
    """The change set of a desired state from every Package's revision (`package_revision`; module
    docstring). (`planning.rollout.fleet_state` holds `ClusterTurns`, so the caller computes the revisions.)"""
    return hashlib.sha256(json.dumps(revisions, sort_keys=True).encode()).hexdigest()[:16]


def change_summary(spec: FleetSpec) -> str:
    """The change set for people: `name version` of every Package."""
    return ", ".join(f"{e.name} {e.spec.get('version', '?')}" + (" (uninstall)" if e.uninstall else "")
                     for e in sorted(spec.packages, key=lambda e: e.name)) or "no Packages"


def clusters_json(clusters: ClustersSpec | None) -> dict[str, object] | None:
    """The policy's spec.clusters as it travels (JSON by alias, every default spelled out)."""
    return None if clusters is None else clusters.model_dump(by_alias=True, mode="json")


def report_state(turns: ClusterTurns, change: str, phase: RolloutPhase, planner_halted: bool) -> ClusterState:
    """This cluster's state for `change`: waiting before its turn, then running, complete or failed
    (a failed fleet halted afterwards, by its operator or by the global workflow, stays failed)."""
    if change != turns.granted:
        return ClusterState.WAITING
    if phase is RolloutPhase.COMPLETE:
        return ClusterState.COMPLETE
    if phase is RolloutPhase.FAILED or planner_halted:
        return ClusterState.FAILED
    if phase is RolloutPhase.HALTED and turns.state == ClusterState.FAILED.value:
        return ClusterState.FAILED
    return ClusterState.RUNNING


def report_key(report: ClusterReport) -> str:
    """What makes two reports the same to the global workflow (the message is not part of it; `ended`
    only when set, so the keys fleets carry from before it existed stay the same)."""
    return json.dumps([report.change, report.state, report.clusters, *(["ended"] if report.ended else [])],
                      sort_keys=True)


def next_report(turns: ClusterTurns, report: ClusterReport) -> ClusterReport | None:
    """`report` when it says something the last one sent did not, else None (marks it sent)."""
    key = report_key(report)
    if key == turns.sent:
        return None
    turns.sent, turns.state = key, report.state
    return report


def take_turn(turns: ClusterTurns, turn: GlobalTurn, change: str) -> bool:
    """Apply the global workflow's answer; True when it grants the fleet's current change set now."""
    turns.view = turn.view
    if turn.report_again:
        turns.sent = ""
        return False
    turns.message = turn.message
    if turn.granted and turn.change == change and turns.granted != change:
        turns.granted = change
        return True
    return False


def reported_ended(turns: ClusterTurns) -> bool:
    """The last report sent said the fleet ended (`report_key` ends with "ended")."""
    return bool(turns.sent) and json.loads(turns.sent)[-1] == "ended"
