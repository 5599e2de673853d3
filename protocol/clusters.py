"""Messages between a cluster's fleet and `global/<policy>` (issue 29, ADR 0017). Pure data.

* A fleet of a named cluster (`fleet/<cluster>/<policy>`) whose policy has `spec.clusters` sends a
  `ClusterReport` whenever what it would say changes: asking for its turn for a change set
  (`waiting`), rolling it out (`running`), its outcome (`complete`, `failed`), or a new copy of the
  policy's `spec.clusters`, and once more with `ended` when it ends (its last Package went). A
  workflow cannot signal-with-start, so its activity `report_to_global` does (signal
  `cluster_report` on `global/<policy>`, task queue `noderoll-global`).
* `global/<policy>` answers every fleet it knows with a `GlobalTurn` (signal `global_turn`) whenever
  its view changes: whether that cluster may roll its change out now, and the whole view (stage,
  every cluster's state), which the fleet shows in its `progress` and so in its statuses.
* `pause`, `resume` and `halt` on `global/<policy>` (contract signals, no payload needed) are relayed
  to every fleet it knows as the fleets' own signals.

States are `api.clusters.ClusterState` values; specs travel as JSON (this module stays a leaf).
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ClusterReport:
    """What one cluster's fleet says to `global/<policy>`."""

    cluster: str
    fleet_workflow_id: str
    # The change set (`planning.clusters.cluster_turns.change_id`: every Package's revision; "" = none yet).
    change: str
    # api.clusters.ClusterState value: waiting, running, complete or failed.
    state: str
    # The cluster's copy of the policy's spec.clusters (JSON by alias; None: the policy has none).
    clusters: dict[str, Any] | None = None
    # What the change is, for people ("sysctl-tuning 1.2.0, kmod 2.0"), and why it failed.
    summary: str = ""
    message: str = ""
    # The fleet ended (no Package left): once every cluster has said so, `global/<policy>` ends too.
    ended: bool = False


@dataclass
class ClusterView:
    """One cluster as `global/<policy>` sees it."""

    cluster: str
    # Index of its stage (-1: in no stage).
    stage: int
    # api.clusters.ClusterState value for the latest change.
    state: str
    change: str = ""
    message: str = ""


@dataclass
class GlobalView:
    """The promotion of one policy's latest change across clusters (the `clusters` of `progress`)."""

    policy: str = ""
    change: str = ""
    summary: str = ""
    # Index of the highest stage granted for `change` (-1: none), and every stage's clusters.
    stage: int = -1
    stages: list[list[str]] = field(default_factory=list)
    # api.enums.RolloutPhase value: Pending, Progressing, Waiting (soaking), Paused, Halted, Complete.
    phase: str = "Pending"
    # RFC 3339 end of the soak before the next stage ("" = not soaking).
    soak_until: str = ""
    # Why the promotion is halted ("" = not halted).
    halted: str = ""
    paused: bool = False
    clusters: list[ClusterView] = field(default_factory=list)
    message: str = ""
    updated_at: str = ""


@dataclass
class GlobalTurn:
    """`global/<policy>`'s answer to one cluster's fleet."""

    # The change this cluster last reported; `granted`: it may roll that change out now.
    change: str
    granted: bool
    message: str = ""
    view: GlobalView = field(default_factory=GlobalView)
    # The global workflow does not know this cluster's word (a new run after its state was lost):
    # the fleet reports again, whatever it sent before.
    report_again: bool = False


@dataclass
class GlobalInput:
    """Input of `global/<policy>` (started by `report_to_global`; continue-as-new fills `carry`)."""

    policy: str
    # Carried across continue-as-new: the global state as JSON (workflows.global_rollout converts).
    carry: dict[str, Any] | None = None
    # History length that triggers continue-as-new (0: the default; tests set it low).
    history_limit: int = 0
