"""Stage, state and status vocabularies as string enums holding the contract strings. Pure.

NodeWright's vocabulary: stages run in a fixed order per operation and each has a `-check`.
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """A package stage (contract strings)."""

    UNINSTALL = "uninstall"
    UPGRADE = "upgrade"
    APPLY = "apply"
    CONFIG = "config"
    INTERRUPT = "interrupt"
    POST_INTERRUPT = "post-interrupt"

    @property
    def check(self) -> str:
        """The name of this stage's check mode in config.json (for example `apply-check`)."""
        return f"{self.value}-check"


class State(StrEnum):
    """The state of one package stage on one node (contract strings)."""

    WAITING = "waiting"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    ERRORING = "erroring"
    SKIPPED = "skipped"
    BLOCKED = "blocked"


class DrainReason(StrEnum):
    """Reason of the `noderoll.io/Draining` node condition (CamelCase, Kubernetes conventions)."""

    # status True: the window drains the node
    WAITING_FOR_PROTECTED_PODS = "WaitingForProtectedPods"
    EVICTING = "Evicting"
    EVICTION_REFUSED = "EvictionRefused"
    # A drain rule `WaitForCompletion` (spec.workloads.rules) waits for pods to finish.
    WAITING_FOR_COMPLETION = "WaitingForCompletion"
    # status False: the drain ended
    DRAINED = "Drained"
    PROTECTED_PODS_FINISHED = "ProtectedPodsFinished"
    DRAIN_FAILED = "DrainFailed"

    @property
    def blocked(self) -> bool:
        """True for the reasons that mean the drain waits on someone else's pods."""
        return self in (DrainReason.WAITING_FOR_PROTECTED_PODS, DrainReason.EVICTION_REFUSED,
                        DrainReason.WAITING_FOR_COMPLETION)


class DrainAction(StrEnum):
    """What a drain does with the pods a rule of `spec.workloads.rules` matches (contract strings)."""

    EVICT = "Evict"
    WAIT_FOR_COMPLETION = "WaitForCompletion"
    DELETE = "Delete"
    LEAVE = "Leave"


class DrainTimeoutAction(StrEnum):
    """`spec.workloads.onDrainTimeout`: what a window does when its drain times out (contract strings)."""

    FAIL = "Fail"
    SKIP = "Skip"


class NodeStatus(StrEnum):
    """Value of the `noderoll.io/status` node label (contract strings)."""

    WAITING = "waiting"
    IN_PROGRESS = "in-progress"
    COMPLETE = "complete"
    ERRORING = "erroring"
    BLOCKED = "blocked"
    # The last GPU verify of the node failed (`spec.verify` of a DeploymentPolicy, api/verify.py).
    VERIFY_FAILED = "verify-failed"


class InterruptType(StrEnum):
    """Interrupt types, weakest first; `planning` merges them by strength."""

    NOOP = "noop"
    SERVICE = "service"
    RESTART_ALL_SERVICES = "restartAllServices"
    REBOOT = "reboot"


class StrategyType(StrEnum):
    """Batch strategy types of a DeploymentPolicy compartment."""

    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"
    # No batches: the budget's windows at all times, the next node as soon as one ends (planning/rollout/rolling.py).
    ROLLING = "rolling"


class Promotion(StrEnum):
    """How a canary is promoted."""

    AUTO = "auto"
    MANUAL = "manual"


class CanaryFailure(StrEnum):
    """What a fleet does when its canary fails (`canary.onFailure` of a DeploymentPolicy)."""

    # Halt the fleet (the canary nodes keep what their windows left); `resume`/`retry` go on.
    HALT = "halt"
    # Bring the canary nodes back to the previous spec of each Package the wave changed, then end
    # the wave `RolledBack` (ADR 0009).
    ROLLBACK = "rollback"


class RolloutPhase(StrEnum):
    """Phase of a Package rollout (also the `NoderollPhase` search attribute on rollouts).

    `Blocked` is never set by a rollout: the Package status (and `noderoll status`) shows it for a
    rollout that is `Complete` while targeted nodes are blocked (`planning.views.status.package_view`).
    """

    PENDING = "Pending"
    CANARY = "Canary"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    HALTED = "Halted"
    COMPLETE = "Complete"
    BLOCKED = "Blocked"
    FAILED = "Failed"
    INVALID = "Invalid"
    UNINSTALLING = "Uninstalling"
    # Fleets: work is left but no maintenance window is open (`spec.maintenanceWindows`).
    WAITING = "Waiting"
    # Fleets (`canary.onFailure: rollback`): the failed canary's nodes go back to the previous specs,
    # then the wave ends rolled back (`planning/rollout/fleet_rollback.py`).
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"


class Weekday(StrEnum):
    """A day of the week in a maintenance window (`spec.maintenanceWindows[].days`), Monday first."""

    MON = "Mon"
    TUE = "Tue"
    WED = "Wed"
    THU = "Thu"
    FRI = "Fri"
    SAT = "Sat"
    SUN = "Sun"

    @property
    def index(self) -> int:
        """0 for Monday ... 6 for Sunday (`datetime.weekday()`)."""
        return list(Weekday).index(self)


class GateWhen(StrEnum):
    """When an analysis gate of a DeploymentPolicy is evaluated (`spec.analysis[].when`)."""

    AFTER_CANARY = "afterCanary"
    BETWEEN_BATCHES = "betweenBatches"
    CONTINUOUS = "continuous"


class PlanAction(StrEnum):
    """What the per-node plan does for one package (`planning/node/node_plan.py`)."""

    INSTALL = "install"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    UNINSTALL = "uninstall"
    CONFIG = "config"
    NONE = "none"


class NodeMarkKind(StrEnum):
    """What a rollout (or a node workflow) shows on a node it cannot update (`planning/node/node_marks.py`)."""

    # `noderoll.io/state` unreadable: condition StateMalformed True, Warning Event, label blocked.
    STATE_MALFORMED = "state-malformed"
    # `noderoll.io/state` reads again after being marked: condition False, label from the state.
    STATE_REPAIRED = "state-repaired"
    # A targeted node the package cannot reach (an untolerated taint): label blocked.
    BLOCKED = "blocked"


class CanaryPhase(StrEnum):
    """Where a rollout's canary stands (`status.canary.phase` of a Package)."""

    NONE = "None"
    RUNNING = "Running"
    SOAKING = "Soaking"
    AWAITING_PROMOTION = "AwaitingPromotion"
    PASSED = "Passed"
    FAILED = "Failed"


class ConditionType(StrEnum):
    """Condition types on a Package's and a DeploymentPolicy's status (Kubernetes conventions)."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    VALID = "Valid"
    # Deletion protection: True while other Packages use the object (crd_bridge/protection.py).
    IN_USE = "InUse"
