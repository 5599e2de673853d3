"""`spec.clusters` of a DeploymentPolicy: the promotion of its changes across clusters. Pure.

    clusters:
      stages: [[canary-1], [eu-1, eu-2], [us-1, us-2, us-3]]
      soakSeconds: 3600
      onFailure: haltAll

Each cluster's fleet (`fleet/<cluster>/<policy>`, a worker and bridge given `--cluster`) asks
`global/<policy>` for its turn before it rolls out a change set, and the global workflow grants the
stages in order: stage n+1 once every cluster of stages 1..n completed the change and `soakSeconds`
passed since the last of them did. `onFailure`: `haltAll` (the default) halts every cluster's fleet
when one cluster fails; `holdPromotion` only stops later stages (the clusters of the failing stage go
on under their own policy). Checked here: at least one stage, no empty stage, cluster names that
are valid (`protocol.names.cluster_name_problem`), each cluster in one stage only. The decisions are
`planning/clusters/global_rollout.py`; this model stays data. ADR 0017.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from api.base import SpecModel
from protocol.names import cluster_name_problem


class ClusterFailure(StrEnum):
    """What a cluster's failure does to the promotion (`spec.clusters.onFailure`)."""

    # Every cluster's fleet is halted (signal `halt`); `resume` on global/<policy> goes on.
    HALT_ALL = "haltAll"
    # No later stage starts; the clusters already granted go on under their own policy.
    HOLD_PROMOTION = "holdPromotion"


class ClusterState(StrEnum):
    """A cluster's state for one change set, as `global/<policy>` records it (status, `progress`)."""

    # Never reported (its bridge or worker is not up, or it has not seen the change yet).
    UNKNOWN = "unknown"
    # Asked for its turn; its stage is not granted yet.
    WAITING = "waiting"
    # Granted: its fleet rolls the change out.
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    # Its copy of spec.clusters disagrees with the one the global workflow runs, or it is in no stage.
    HELD = "held"


class ClustersSpec(SpecModel):
    """`spec.clusters`: stages of cluster names, the soak between stages, what a failure does."""

    stages: list[list[str]] = Field(min_length=1)
    soak_seconds: int = Field(default=0, ge=0)
    on_failure: ClusterFailure = ClusterFailure.HALT_ALL

    @field_validator("stages")
    @classmethod
    def _stages_valid(cls, stages: list[list[str]]) -> list[list[str]]:
        seen: dict[str, int] = {}
        for index, stage in enumerate(stages):
            if not stage:
                raise ValueError(f"stages[{index}] is empty; every stage names at least one cluster")
            for name in stage:
                problem = cluster_name_problem(name)
                if problem:
                    raise ValueError(f"stages[{index}]: {problem}")
                if name in seen:
                    raise ValueError(f"cluster {name!r} is in stages[{seen[name]}] and stages[{index}]; "
                                     "a cluster belongs to one stage")
                seen[name] = index
        return stages

    def stage_of(self, cluster: str) -> int | None:
        """The index of the stage naming `cluster`, None when no stage does."""
        for index, stage in enumerate(self.stages):
            if cluster in stage:
                return index
        return None
