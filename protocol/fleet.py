"""Messages of fleet rollouts: bridge -> fleet, fleet -> node workflow, node workflow -> fleet. Pure data.

The protocol (docs/architecture.md, ADR 0007):

* The bridge hands each fleet (`fleet/<policy>`, one per DeploymentPolicy, `fleet/default` for
  Packages naming none) its whole desired state, a `FleetSpec`, with signal-with-start `desired`
  whenever a Package of the fleet or the policy changes. The fleet compares it with what it has;
  the same spec twice changes nothing.
* Operators send `pause`, `resume`, `halt` and `retry`, each with an optional `Filter`.
* The bridge signals `nodes_changed` (no payload: nodes joined or changed what targets them; the
  fleet lists its nodes again) and `availability_changed` (an `AvailabilityChanged`: nodes cordoned,
  uncordoned or turned NotReady/Ready by someone else, for capacity floors to react at once).
* The fleet hands a node ONE `WindowRequest` carrying every Package of the fleet pending there
  (signal-with-start `window` on `node/<node>`); the node workflow answers every request exactly
  once with a `WindowResult` (signal `window_result`), also when it withdraws a queued request on
  `window_cancel`.

Specs travel as the JSON of `api.package.PackageSpec` / `api.policy.DeploymentPolicySpec`
(dumped by alias): this module stays a leaf and the receiver validates.
"""


from dataclasses import dataclass, field
from typing import Any


@dataclass
class PackageEntry:
    """One Package of a fleet, as the bridge observed it."""

    name: str
    # The PackageSpec as validated JSON (by alias).
    spec: dict[str, Any]
    generation: int
    uid: str = ""
    # `spec.paused` or the `noderoll.io/pause` annotation: kept out of new windows.
    paused: bool = False
    # The Package is being deleted with `uninstall.enabled`: uninstall it wherever it is recorded.
    uninstall: bool = False
    # The `noderoll.io/rerun` annotation (`<id>[:<stage>]`): the fleet runs the Package again once per id.
    rerun: str = ""


@dataclass
class FleetSpec:
    """The desired state of one fleet: its policy and every Package that names it."""

    policy_name: str
    # The DeploymentPolicySpec as validated JSON; None for the built-in `default` policy.
    policy: dict[str, Any] | None = None
    policy_generation: int = 0
    packages: list[PackageEntry] = field(default_factory=list)


@dataclass
class AvailabilityChanged:
    """Signal `availability_changed` (bridge -> fleet): these nodes, which a Package of the fleet targets,
    were cordoned or uncordoned by someone else (not noderoll's own cordon), or turned NotReady or
    Ready outside noderoll's own window, since the last such signal (sorted; a burst is one signal)."""

    nodes: list[str] = field(default_factory=list)


@dataclass
class FleetInput:
    """Input of `fleet/<policy>` (started by the bridge with signal-with-start `desired`)."""

    policy_name: str
    # Task queue of the node workflows ("" = the fleet's own).
    node_task_queue: str = ""
    # How often the fleet re-lists its nodes on its own (joiners, lifted taints) besides `nodes_changed`.
    relist_seconds: int = 300
    # How often, while windows are out, the fleet checks that their node workflows still run.
    watchdog_seconds: int = 60
    # At most one `nodes_changed` re-list per this many seconds (the bridge's --fleet-relist-min-seconds):
    # a burst of node changes (a batch's own cordons and reboots) costs one listing, not one each.
    relist_min_seconds: int = 30
    # History length that triggers continue-as-new (0: the fleet's default; tests set it low).
    history_limit: int = 0
    # Carried across continue-as-new: the fleet's state as JSON (planning.fleet.codec converts).
    carry: dict[str, Any] | None = None
    # The cluster name of the bridge that started it ("" = none): its id is `fleet/<cluster>/<policy>`,
    # its node workflows' `node/<cluster>/<node>` (ADR 0017).
    cluster: str = ""


@dataclass
class Filter:
    """Optional payload of `pause`, `resume`, `halt`, `retry`: only these Packages and/or nodes.

    Empty lists mean every Package and every node. With both set, the signal applies to those
    Packages on those nodes where that distinction exists (`retry`), else to each list.
    """

    packages: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        """True when the signal applies to the whole fleet."""
        return not self.packages and not self.nodes


@dataclass
class ProgressFilter:
    """Optional argument of the fleet query `progress`: which nodes its answer lists (`FleetProgress.nodes`).

    Without one (or with none of `nodes`, `states`, `all` set) the answer is the fleet's summary: its counts,
    per Package and per compartment, its disruptions summed, and no node listed (issue 45: a 10,000-node
    answer listing every node was 1.7 MB). With one it lists, in name order, the nodes named in `nodes`, those
    in one of `states` (api.enums.State values) or, with `all`, every node; a page at a time: those after
    `after`, at most `limit` (0: 500; at most 1,000). The answer's `nodes_next` is the `after` of the next page.
    """

    nodes: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    all: bool = False
    after: str = ""
    limit: int = 0

    def lists_nodes(self) -> bool:
        """The filter asks for nodes (else: the summary only)."""
        return bool(self.nodes or self.states or self.all)


@dataclass
class Rerun:
    """Payload of the fleet signal `rerun`: run a completed Package again (once per `id`).

    `nodes` empty: every node where the Package is complete. `stage` empty: the whole install
    sequence (`apply`, `config`, then the interrupt and `post-interrupt` when it has one); else
    from that stage of it on.
    """

    id: str
    package: str
    nodes: list[str] = field(default_factory=list)
    stage: str = ""


@dataclass
class NodeReset:
    """Payload of the node signal `reset` (signal-with-start on `node/<node>`): forget recorded state.

    `packages` empty: the whole record (also an unreadable one). Applied between windows, once per `id`.
    """

    id: str
    packages: list[str] = field(default_factory=list)
    # Who asked (shown in the node's Event): "noderoll node reset", "annotation noderoll.io/reset", ...
    source: str = ""


@dataclass
class PackageOrder:
    """One Package a window must bring to its spec (or uninstall)."""

    name: str
    spec: dict[str, Any]
    generation: int
    uninstall: bool = False
    # A `Rerun` this order carries ("" = none): the Package runs again although it is complete,
    # from `rerun_stage` ("" = the whole install sequence).
    rerun: str = ""
    rerun_stage: str = ""
    # The Package object's uid ("" unknown): with `generation`, NodeWright's SKYHOOK_RESOURCE_ID, so
    # the window's stage pods need not read the Package (issue #26).
    uid: str = ""


@dataclass
class WindowRequest:
    """A fleet asks a node for one window covering `packages` (one drain, one merged interrupt)."""

    fleet_workflow_id: str
    # Unique within the fleet; the node workflow drops a request id it has seen.
    request_id: str
    packages: list[PackageOrder] = field(default_factory=list)
    wave: int = 0
    # The node's position in the order the fleet asked its nodes in this wave (0 first):
    # NodeWright's SKYHOOK_NODE_ORDER in the stage pods.
    node_order: int = 0
    # The policy's `spec.workloads` as JSON by alias (api.workloads.WorkloadsSpec, validated by the node
    # side); None: the policy has none, and the window drains as before (requests made before it too).
    workloads: dict[str, Any] | None = None
    # The policy's `spec.verify` as JSON (by alias; the node side validates, api/verify.py): the GPU
    # verify after the window's interrupt. None: no verify (requests made before it).
    verify: dict[str, Any] | None = None


@dataclass
class WindowCancel:
    """A fleet withdraws its request (halt, filter): dropped only when its window has not started."""

    fleet_workflow_id: str
    request_id: str


@dataclass
class PackageOutcome:
    """The outcome of one Package in one window."""

    # api.enums.State value: complete, erroring, blocked or skipped.
    state: str
    version: str = ""
    stage: str | None = None
    message: str = ""
    log_tail: str = ""


@dataclass
class WindowResult:
    """A node workflow's answer to one `WindowRequest` (exactly one per request)."""

    node: str
    request_id: str
    outcomes: dict[str, PackageOutcome] = field(default_factory=dict)
    # The request was withdrawn (`window_cancel`) or superseded before its window started.
    withdrawn: bool = False
    # What the window did to the node (disruption accounting).
    cordoned: bool = False
    drained: bool = False
    # Type of the merged interrupt that ran ("" when none).
    interrupt: str = ""
    message: str = ""
    # Why the window gave the node up ("" = it did not): `drain-timeout` (`spec.workloads.onDrainTimeout:
    # Skip`). Every Package is then answered `blocked`; the fleet asks again on `retry` or a new wave only.
    skipped: str = ""
