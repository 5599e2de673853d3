"""The data of one node window: what it was asked and planned (`WindowContext`) and what happened
(`WindowLedger`). Deterministic, no I/O.

The window's sequencer (`workflows/node_window.py`) and its stage pods (`workflows/node_pods.py`)
both receive the ledger they record into, and read the context; neither holds the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from api.node_state import NodeState
from api.package import PackageSpec
from api.verify import VerifySpec
from api.workloads import WorkloadsSpec
from planning.node.node_plan import NodePlan, NodeWindow
from planning.node.verify import VerifyOutcome
from planning.node.window import (
    EntryUpdate,
    TimeLimits,
    package_limits,
    stage_tolerations,
    updated_entry,
    window_limits,
)
from protocol import errors
from protocol.fleet import PackageOrder
from protocol.node import NodeWorkflowInput
from protocol.node_activities import NodeEvent, ReadNodeResult, StageJob


@dataclass
class WindowContext:
    """Everything one window was given and planned; read only once the window runs."""

    settings: NodeWorkflowInput
    # Unique per window within the node workflow (pod names, Event keys).
    key: str
    snapshot: ReadNodeResult
    recorded: NodeState
    plan: NodePlan
    window: NodeWindow
    # The fleet's order and the validated spec of each Package of the window.
    orders: dict[str, PackageOrder]
    specs: dict[str, PackageSpec]
    # The node's position in the fleet's order (NodeWright's SKYHOOK_NODE_ORDER).
    node_order: int
    set_phase: Callable[[str], None]
    # The fleet's policy's `spec.workloads` (None: drain as before) and the fleet asking (`fleet/<policy>`).
    workloads: WorkloadsSpec | None = None
    fleet: str = ""
    # The request's `spec.verify` (api/verify.py); None: the window runs no GPU verify.
    verify: VerifySpec | None = None

    @property
    def node(self) -> str:
        return self.settings.node

    def default_limits(self) -> TimeLimits:
        """The worker's bounds, which a Package's `limits` replace."""
        settings = self.settings
        return TimeLimits(settings.protected_pods_timeout_seconds, settings.stage_timeout_seconds,
                          settings.reboot_timeout_seconds)

    def limits(self, names: list[str]) -> TimeLimits:
        """The bounds of a step shared by `names` (the largest of their `limits`)."""
        return window_limits([self.specs[n] for n in names], self.default_limits())

    def stage_job(self, name: str, mode: str, attempt: int) -> StageJob:
        """The stage pod of package `name` whose pod starts with `mode` (its caller sets the pod's modes)."""
        spec = self.specs[name]
        return StageJob(
            package=name, version=spec.version, node=self.node, mode=mode, image=spec.image,
            attempt=attempt, window=self.key,
            env=[{"name": e.name, "value": e.value} for e in spec.env],
            resources=spec.resources.model_dump(by_alias=True) if spec.resources else {},
            tolerations=stage_tolerations(self.snapshot.taints, spec),
            config=dict(spec.config), timeout_seconds=package_limits(spec, self.default_limits()).stage,
            agent_image=spec.agent_image or "", image_pull_secrets=[s.name for s in spec.image_pull_secrets],
            node_order=self.node_order, **self._identity(name),
        )

    def _identity(self, name: str) -> dict[str, object]:
        """The Package's uid and the generation the fleet's order applies (none known: {})."""
        order = self.orders.get(name)
        if order is None or not order.uid:
            return {}
        return {"package_uid": order.uid, "generation": order.generation}

    def event(self, reason: str, message: str, warning: bool = False) -> NodeEvent:
        """An Event of this window on the Node (its key makes a retried write idempotent)."""
        return NodeEvent(reason=reason, message=message, key=f"{self.key}/{reason}/{message[:40]}", warning=warning)


@dataclass
class Failure:
    """Why a package ended erroring in this window."""

    stage: str
    message: str
    log: str = ""


@dataclass
class WindowLedger:
    """What the window did so far: the node's record as it will be written, and the disruptions."""

    state: NodeState
    failures: dict[str, Failure] = field(default_factory=dict)
    # Packages not run because a dependency failed earlier in this window -> why.
    skipped: dict[str, str] = field(default_factory=dict)
    cordoned: bool = False
    drained: bool = False
    interrupted: bool = False
    # Events gathered during the window, written with the final state (one write per window).
    notes: list[NodeEvent] = field(default_factory=list)
    # Stage Jobs (issue #14): packages that ran one in this window, the latest failed one per
    # package, and the package and pod of the last interrupt attempt (deleted or kept at the end).
    job_packages: set[str] = field(default_factory=set)
    failed_jobs: dict[str, str] = field(default_factory=dict)
    last_interrupt_job: tuple[str, str] = ("", "")
    # pod -> the Package it is labelled with, for pods of several Packages (their first; ADR 0016).
    job_labels: dict[str, str] = field(default_factory=dict)
    # `spec.workloads` (workflows/node_workloads.py): an eviction notice was given (the close takes it
    # back); the drain timed out and the window gave the node up (why; "" = it did not).
    noticed: bool = False
    drain_skipped: str = ""
    # The GPU verify (workflows/node_verify.py): what its pod said (None: none ran), the failure that
    # fails the window's Packages, and whether noderoll's cordon stays because of it.
    verify: VerifyOutcome | None = None
    verify_failure: VerifyOutcome | None = None
    keep_cordon: bool = False

    def set_entry(self, name: str, update: EntryUpdate) -> None:
        """Apply `update` to package `name`'s entry (stamped with the workflow's time)."""
        self.state.packages[name] = updated_entry(self.state.packages[name], update, workflow.now().isoformat())

    def fail(self, name: str, failure: Failure, update: EntryUpdate) -> None:
        """Package `name` ends erroring in this window."""
        self.failures[name] = failure
        self.set_entry(name, update)

    def note_job(self, package: str, job_name: str, failed: bool) -> None:
        """A stage pod ran for `package` (and failed): deleted, or kept as its latest failure, at the end."""
        if job_name:
            self.job_packages.add(package)
            if failed:
                self.failed_jobs[package] = job_name

    def leave_as_recorded(self, name: str, recorded: NodeState) -> None:
        """Package `name` did nothing in this window: its record goes back to what it was before it."""
        previous = recorded.packages.get(name)
        if previous is None:
            self.state.packages.pop(name, None)
        else:
            self.state.packages[name] = previous.model_copy(deep=True)

    def healthy(self, names: tuple[str, ...] | list[str]) -> list[str]:
        """Those of `names` that neither failed nor were skipped in this window."""
        return [n for n in names if n not in self.failures and n not in self.skipped]


def cause(err: ActivityError) -> str:
    """The failure of an activity as one line: `<type>: <message>` for application errors."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or err)


def node_gone(err: ActivityError) -> bool:
    """True when the activity failed because the node does not exist (any more)."""
    return isinstance(err.cause, ApplicationError) and err.cause.type == errors.NODE_NOT_FOUND
