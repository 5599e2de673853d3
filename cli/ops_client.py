"""Shared Temporal and Kubernetes access of the ops commands and the demo. Does I/O.

The commands talk to the cluster the way the bridge does: the `progress` query and the contract
signals (`pause`, `resume`, `halt`, `retry`, each with an optional `protocol.fleet.Filter`) on the
fleet rollouts `fleet/<policy>` (`fleet/default` for Packages naming no policy), the Package
objects, the `noderoll.io/state` annotation of every Node, and the stage pods in
`noderoll-system`. How Packages map to fleets, and the views built from both: `cli.ops_fleets`.

Where a value comes from is always reported (`source` fields), because there are fallbacks:
* progress: the fleet's `progress` query (per Package: `.packages[name]`); when the fleet cannot
  answer (no worker running, not started yet) the Package's status subresource that the bridge
  wrote from that same query;
* a stage log: the pod log (`pods/log`, needs a kubelet); else the last lines the kubelet (or
  fleetsim) kept in `state.terminated.message`; and, on a fleetsim node whose sandbox is on this
  machine, fleetsim's full copy of the log.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

import kube
from api import keys
from api.enums import CanaryPhase, RolloutPhase
from api.node_state import NodeState, PackageNodeState, parse_node_state
from api.package import Limits
from api.stage_containers import container_name, is_copy, pod_packages, split_container
from api.status import PackageStatus
from kube.node_snapshot import node_facts
from kube.pod_wait import pod_outcome
from localstack.state import resolve_connection
from planning.fleet.codec import progress_from_json
from planning.node.drain import DrainBlock, DrainCondition, drain_block, read_drain_condition
from planning.views.fleet_status import NODES_PAGE_MAX, FleetProgress, NodeProgress, read_at
from planning.views.status import RolloutProgress
from protocol import names
from protocol.fleet import Filter, ProgressFilter
from service.temporal_client import connect

QUERY_TIMEOUT = timedelta(seconds=5)
# pods/log goes through the kubelet; a node without one (fleetsim) must not stall the command.
POD_LOG_TIMEOUT_SECONDS = 5
# fleetsim's node labels and its log copy (fleetsim/context.py, fleetsim/stagepods.py). Spelled out
# here because only the demo, tests and benchmarks import fleetsim (docs/architecture.md).
FLEETSIM_LABEL = "fleetsim.noderoll.io/simulated"
FLEETSIM_PREFIX_LABEL = "fleetsim.noderoll.io/prefix"
FLEETSIM_DEFAULT_SANDBOX = Path("/tmp/noderoll-fleetsim")
FLEETSIM_POD_LOGS = Path("var/log/noderoll/pods")
SANDBOX_ENV = "NODEROLL_SANDBOX_DIR"


class OpsError(RuntimeError):
    """A command cannot do what was asked; the message says why and what to do."""


class NoAnswer(RuntimeError):
    """A fleet did not answer a query: it does not run (never started, or its last run closed), or it
    runs and did not answer (no worker polling, the query timed out or failed): `running` says which."""

    def __init__(self, message: str, running: bool = False) -> None:
        super().__init__(message)
        self.running = running


@dataclass(frozen=True)
class OpsTarget:
    """Where the commands connect."""

    temporal_address: str
    namespace: str
    kubeconfig: str | None
    source: str
    # The cluster's name ("" = none): fleets are `fleet/<cluster>/<policy>` (ADR 0017).
    cluster: str = ""


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """The common connection flags (docs/architecture.md "CLI")."""
    parser.add_argument("--temporal-address", default=None,
                        help="host:port of Temporal (env NODEROLL_TEMPORAL_ADDRESS; default: dev stack)")
    parser.add_argument("--temporal-namespace", default=os.environ.get("NODEROLL_TEMPORAL_NAMESPACE",
                                                                       names.DEFAULT_NAMESPACE),
                        help="Temporal namespace (env NODEROLL_TEMPORAL_NAMESPACE)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (env KUBECONFIG; default: dev stack)")
    parser.add_argument("--state-dir", default=None, help="dev stack state dir (env NODEROLL_STATE_DIR)")
    parser.add_argument("--cluster", default=os.environ.get("NODEROLL_CLUSTER", ""), metavar="NAME",
                        help="the cluster's name, as its worker and bridge were given it (env NODEROLL_CLUSTER)")


def target_from_args(args: argparse.Namespace) -> OpsTarget:
    """Flags, then environment, then a running dev stack; an OpsError when Temporal is unknown."""
    connection = resolve_connection(args.temporal_address, args.kubeconfig, args.state_dir)
    if connection.temporal_address is None:
        raise OpsError("no Temporal address: use --temporal-address, NODEROLL_TEMPORAL_ADDRESS, "
                       "or start a stack with `noderoll dev up` (or `noderoll demo --keep`)")
    cluster = str(getattr(args, "cluster", "") or "")
    problem = names.cluster_name_problem(cluster) if cluster else ""
    if problem:
        raise OpsError(f"--cluster: {problem}")
    return OpsTarget(connection.temporal_address, args.temporal_namespace, connection.kubeconfig,
                     connection.source, cluster)


@dataclass
class PackageView:
    """A Package's rollout as the commands show it."""

    name: str
    progress: RolloutProgress
    # "temporal query" or "Package status" (the bridge's copy of the query).
    source: str
    exists: bool = True
    # The fleet that rolls it out: its DeploymentPolicy, or `default`.
    fleet: str = names.DEFAULT_FLEET
    # Target nodes whose drain waits on someone else's pods (read from the Nodes, `drain_blocks`).
    drain_blocked: list[DrainBlock] = field(default_factory=list)
    # The Package's spec.limits (None: not read, e.g. in the table of every Package).
    limits: Limits | None = None


@dataclass
class NodeRow:
    """One Node as the CLI shows it (`noderoll nodes`, `status`, the demo): its noderoll status label, cordon
    and readiness, and every package recorded on it. Not `planning.node.targets.NodeView` (the planners' input)."""

    name: str
    status: str
    ready: bool
    cordoned: bool
    cordoned_by_noderoll: bool
    packages: dict[str, PackageNodeState] = field(default_factory=dict)
    # Set when the state annotation is unreadable (then `packages` is empty).
    state_problem: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # `status.nodeInfo.bootID`: a new one after every reboot (the kubelet's, or fleetsim's).
    boot_id: str = ""
    # Fleet name -> what that fleet reports for this node (state, disruptions), when it answered.
    fleets: dict[str, NodeProgress] = field(default_factory=dict)
    # The `noderoll.io/Draining` condition (None: the node was never drained by noderoll).
    drain: DrainCondition | None = None
    # `status.allocatable` (resource -> quantity): what capacity floors count.
    allocatable: dict[str, str] = field(default_factory=dict)


@dataclass
class StageLog:
    """The log of one stage pod and where it was read from."""

    pod: str
    mode: str
    phase: str
    exit_code: int | None
    text: str
    source: str


def progress_from_status(status: dict[str, Any]) -> RolloutProgress:
    """A RolloutProgress from a Package's status subresource (what the bridge rendered). Pure."""
    parsed = PackageStatus.model_validate(status or {})
    counts = parsed.nodes.model_dump(by_alias=False)
    total = int(counts.pop("total", 0))
    return RolloutProgress(
        phase=parsed.phase,
        version=parsed.version or "",
        total_nodes=total,
        counts={k: int(v) for k, v in counts.items() if v},
        batch_number=parsed.current_batch.number,
        batch_size=parsed.current_batch.size,
        canary_phase=parsed.canary.phase or CanaryPhase.NONE,
        canary_nodes=list(parsed.canary.nodes),
        blocked={r.node: r.reason for r in parsed.blocked_nodes},
        erroring={r.node: r.reason for r in parsed.erroring_nodes},
        skipped={r.node: r.reason for r in parsed.skipped_nodes or []},
        message=parsed.message,
    )


def node_row(node: Mapping[str, Any]) -> NodeRow:
    """Read one Node object (API JSON) into the CLI's NodeRow. Pure."""
    facts = node_facts(node)  # the one Node snapshot (kube.node_snapshot); the drain condition besides
    state, problem = parse_node_state(facts.state_annotation or None)
    drain = read_drain_condition((node.get("status") or {}).get("conditions") or [])
    return NodeRow(
        name=facts.name,
        status=facts.status_label,
        ready=facts.ready,
        cordoned=facts.unschedulable,
        cordoned_by_noderoll=facts.cordoned_by == keys.CORDONED_BY_VALUE,
        packages=dict((state or NodeState()).packages),
        state_problem=problem,
        labels=facts.labels,
        boot_id=facts.boot_id,
        drain=drain,
        allocatable=facts.allocatable,
    )


def drain_blocks(package: str, nodes: list[NodeRow]) -> list[DrainBlock]:
    """The nodes whose drain holds up `package`'s window there (as the bridge computes it). Pure."""
    blocks = (drain_block(n.name, n.drain, n.packages.get(package)) for n in nodes)
    return [b for b in blocks if b is not None]


def _pod_exit(pod: k8s.V1Pod) -> tuple[int | None, str, str]:
    """(exit code, terminated message, container) of a finished stage pod: the container that
    decided it (a failing stage or check), else the last one; (None, "", "") while it runs."""
    outcome = pod_outcome(pod)
    if outcome is None:
        return None, "", ""
    return outcome.exit_code, outcome.log_tail, outcome.mode


def pod_packages_of(pod: k8s.V1Pod) -> list[str]:
    """The Packages a stage pod runs, in order (`api.stage_containers.pod_packages`). Pure."""
    return pod_packages(pod.metadata.labels, pod.metadata.annotations)


def pod_modes(pod: k8s.V1Pod, package: str = "") -> list[str]:
    """The modes a stage pod runs (of `package` only, in a pod of several Packages): its containers
    but the package copies, in order. Pure."""
    spec = pod.spec
    containers = [*((spec.init_containers or []) if spec else []), *((spec.containers or []) if spec else [])]
    packages = pod_packages_of(pod)
    found = [split_container(c.name, packages) for c in containers if not is_copy(c.name)]
    return [mode for owner, mode in found if not package or owner == package]


def mode_container(pod: k8s.V1Pod, package: str, mode: str) -> str:
    """The name of the container running `package`'s `mode` in the pod (`api.stage_containers`). Pure."""
    packages = pod_packages_of(pod)
    index = packages.index(package) if package in packages else 0
    return container_name(index, len(packages), mode)


def _container_exit(pod: k8s.V1Pod, container: str) -> tuple[int | None, str, str]:
    """(exit code, terminated message, container) of one container; (None, "", name) while it has not ended."""
    status = pod.status
    for item in [*((status.init_container_statuses or []) if status else []),
                 *((status.container_statuses or []) if status else [])]:
        terminated = item.state.terminated if item.state else None
        if item.name == container and terminated is not None:
            return int(terminated.exit_code), terminated.message or "", container
    return None, "", container


def _none_if_missing(call: Any, *args: Any) -> dict[str, Any] | None:
    """`call(*args)` on a custom object; None when it does not exist (404), other errors raised."""
    try:
        obj: dict[str, Any] = call(*args)
        return obj
    except ApiException as err:
        if kube.is_not_found(err):
            return None
        raise


class Ops:
    """A connected pair of clients (Temporal, Kubernetes) with the commands' reads and writes."""

    def __init__(self, target: OpsTarget, temporal: Client, api: k8s.ApiClient) -> None:
        self.target = target
        self.temporal = temporal
        self.api = api
        self.custom = k8s.CustomObjectsApi(api)

    @functools.cached_property
    def core(self) -> k8s.CoreV1Api:
        # Built on first use: importing the typed core API is 0.6 s of a command's start-up here, and
        # `noderoll status` reads the Nodes raw (`list_nodes`) and needs nothing else of it (issue 45).
        return k8s.CoreV1Api(self.api)

    @classmethod
    async def connect(cls, target: OpsTarget) -> Ops:
        """Connect to Temporal and build the Kubernetes client (kubeconfig, else in-cluster)."""
        try:
            temporal = await connect(target.temporal_address, target.namespace)
        except RuntimeError as err:
            raise OpsError(f"cannot reach Temporal at {target.temporal_address}: {err}") from err
        try:
            api = kube.new_api_client(target.kubeconfig)
        except k8s_config.ConfigException as err:
            if target.kubeconfig:
                raise OpsError(f"kubeconfig {target.kubeconfig}: {err}") from err
            raise OpsError("no kubeconfig: use --kubeconfig, KUBECONFIG, or start a stack with "
                           "`noderoll dev up`") from err
        return cls(target, temporal, api)

    def close(self) -> None:
        """Release the Kubernetes connection pool."""
        self.api.close()

    # --- Temporal --------------------------------------------------------------------------

    def fleet(self, fleet: str) -> WorkflowHandle[Any, Any]:
        """The handle of `fleet/<fleet>` (`fleet/<cluster>/<fleet>`; latest run)."""
        return self.temporal.get_workflow_handle(names.fleet_workflow_id(fleet, self.target.cluster))

    async def query_fleet(self, fleet: str, nodes: ProgressFilter | None = None) -> FleetProgress:
        """The running fleet's `progress` query (its summary; with `nodes`, also the nodes it asks for); NoAnswer
        (saying why) when it cannot answer."""
        args = () if nodes is None else (nodes,)
        answer = progress_from_json(await self.ask_fleet(fleet, names.QUERY_PROGRESS, *args))
        # The ETA as of now, not as of the fleet's last workflow task (planning.views.eta.eta_at).
        return read_at(answer, datetime.now(UTC).isoformat())

    async def fleet_nodes(self, fleet: str, only: Collection[str] | None = None) -> dict[str, NodeProgress]:
        """Every node of the running fleet (or the `only` ones) as it reports them, a page of the `progress`
        query at a time (issue 45: a fleet lists its nodes only when asked, NODES_PAGE_MAX at most per answer)."""
        found: dict[str, NodeProgress] = {}
        if only is not None:
            wanted = sorted(set(only))
            for start in range(0, len(wanted), NODES_PAGE_MAX):
                page = wanted[start:start + NODES_PAGE_MAX]
                found.update((await self.query_fleet(fleet, ProgressFilter(nodes=page, limit=NODES_PAGE_MAX))).nodes)
            return found
        after = ""
        while True:
            answer = await self.query_fleet(fleet, ProgressFilter(all=True, after=after, limit=NODES_PAGE_MAX))
            found.update(answer.nodes)
            if not answer.nodes_next:
                return found
            after = answer.nodes_next

    async def ask_fleet(self, fleet: str, query: str, *args: Any) -> Any:
        """The running fleet's answer to `query`; NoAnswer saying why when there is none: `running`
        False when no run of it is open (never started, or closed), True when it runs and did not answer.

        A closed run is not asked: Temporal would answer from its history, and a fleet terminated
        or ended earlier (say by an earlier demo) would report work that is not this rollout's.
        """
        handle = self.fleet(fleet)
        try:
            return await handle.query(query, *args, reject_condition=QueryRejectCondition.NOT_OPEN,
                                      rpc_timeout=QUERY_TIMEOUT)
        except WorkflowQueryRejectedError as err:
            status = err.status.name.lower() if err.status is not None else "closed"
            raise NoAnswer(f"{handle.id} is not running (its last run is {status})") from err
        except WorkflowQueryFailedError as err:
            raise NoAnswer(f"{handle.id} failed the query {query}: {err}", running=True) from err
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise NoAnswer(f"{handle.id} has never run") from err
            # The client's own timeout ends the call as CANCELLED ("Timeout expired"), the server's as
            # DEADLINE_EXCEEDED: either way nobody answered in time.
            if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise NoAnswer(f"{handle.id} did not answer within {QUERY_TIMEOUT.seconds}s "
                               "(is a worker polling its task queue?)", running=True) from err
            raise NoAnswer(f"{handle.id} did not answer: {err.message}", running=True) from err

    async def running_fleets(self, package: str | None = None) -> list[str]:
        """Fleets with a running workflow (those carrying `package` when given), from Temporal's visibility.

        Visibility is eventually consistent and may be unavailable: an error gives an empty list,
        the callers also know the fleets of the Package objects.
        """
        query = f"WorkflowType = '{names.FLEET_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
        if package:
            query += f" AND {names.SEARCH_ATTR_PACKAGE} = '{package}'"
        found: set[str] = set()
        prefix = names.fleet_id_prefix(self.target.cluster)
        try:
            async for execution in self.temporal.list_workflows(query, rpc_timeout=QUERY_TIMEOUT):
                if execution.id.startswith(prefix) and "/" not in execution.id.removeprefix(prefix):
                    found.add(execution.id.removeprefix(prefix))
        except RPCError:
            return []
        return sorted(found)

    async def signal_fleet(self, fleet: str, name: str, scope: Filter) -> None:
        """Send a contract signal with its filter to `fleet/<fleet>`; OpsError when it is not running."""
        handle = self.fleet(fleet)
        try:
            await handle.signal(name, scope)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise OpsError(f"{handle.id} is not running: no valid Package names DeploymentPolicy "
                               f"{fleet}, or `noderoll bridge` has not started it") from err
            raise OpsError(f"cannot signal {name} to {handle.id}: {err.message}") from err

    # --- Kubernetes ------------------------------------------------------------------------

    def list_packages(self) -> list[dict[str, Any]]:
        """Every Package object, sorted by name."""
        result = self.custom.list_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL)
        return sorted(result.get("items") or [], key=lambda o: o["metadata"]["name"])

    def read_policy(self, name: str) -> dict[str, Any] | None:
        """One DeploymentPolicy object, or None when it does not exist."""
        return _none_if_missing(self.custom.get_cluster_custom_object, keys.GROUP, keys.VERSION,
                                keys.POLICY_PLURAL, name)

    def set_pause_annotation(self, name: str, paused: bool) -> dict[str, Any] | None:
        """Set or remove `noderoll.io/pause` on the Package (the lasting switch the bridge maps to pause).

        Returns the updated Package, or None when there is no such Package.
        """
        patch = {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: "true" if paused else None}}}
        return _none_if_missing(self.custom.patch_cluster_custom_object, keys.GROUP, keys.VERSION,
                                keys.PACKAGE_PLURAL, name, patch)

    def read_package(self, name: str) -> dict[str, Any] | None:
        """One Package object, or None when it does not exist."""
        return _none_if_missing(self.custom.get_cluster_custom_object, keys.GROUP, keys.VERSION,
                                keys.PACKAGE_PLURAL, name)

    def package_limits(self, name: str) -> Limits | None:
        """The Package's `spec.limits` (unset fields None), or None when there is no such Package."""
        obj = self.read_package(name)
        if obj is None:
            return None
        try:
            return Limits.model_validate((obj.get("spec") or {}).get("limits") or {})
        except ValidationError:
            return Limits()  # stored before the webhook with out-of-range values: the bridge reports them

    def list_nodes(self, selector: str | None = None) -> list[NodeRow]:
        """Every Node (optionally by label selector), sorted by name; read as API JSON (no typed models)."""
        query = [("labelSelector", selector)] if selector else []
        nodes = kube.request_json("GET", "/api/v1/nodes", query=query, api=self.api).get("items") or []
        return sorted((node_row(n) for n in nodes), key=lambda v: v.name)

    def stage_pods(self, package: str, node: str, mode: str | None = None) -> list[k8s.V1Pod]:
        """The stage pods of `package` on `node`, oldest first; with `mode`, those that run it (a pod
        of several stages runs each as a container named after its mode)."""
        # A pod of several Packages is labelled with its first: the node's stage pods, by their Packages.
        selector = f"{keys.STAGE_COMPONENT_LABEL}={keys.STAGE_COMPONENT},{keys.STAGE_NODE_LABEL}={node}"
        pods = self.core.list_namespaced_pod(keys.PACKAGE_POD_NAMESPACE, label_selector=selector).items
        pods = [p for p in pods if package in pod_packages_of(p)]
        if mode:
            pods = [p for p in pods if mode in pod_modes(p, package) or (
                (p.metadata.labels or {}).get(keys.STAGE_MODE_LABEL) == mode and len(pod_packages_of(p)) == 1)]
        return sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))

    def stage_log(self, pod: k8s.V1Pod, sandbox_dirs: list[Path], mode: str | None = None,
                  package: str = "") -> StageLog:
        """The pod's log from the best source available (see the module docstring): of `mode`'s
        container when given (`package`'s, in a pod of several Packages), else of the container that
        decided the pod (the failing one, else the last)."""
        name, labels = pod.metadata.name, pod.metadata.labels or {}
        exit_code, message, container = _pod_exit(pod)
        wanted = mode_container(pod, package or pod_packages_of(pod)[0], mode) if mode else ""
        if mode and mode in pod_modes(pod, package) and wanted != container:
            exit_code, message, container = _container_exit(pod, wanted)
        base = StageLog(name, container or labels.get(keys.STAGE_MODE_LABEL, ""), pod.status.phase if pod.status else "",
                        exit_code, "", "")
        try:
            base.text = self.core.read_namespaced_pod_log(
                name, keys.PACKAGE_POD_NAMESPACE, container=container or None,
                _request_timeout=POD_LOG_TIMEOUT_SECONDS)
            base.source = "pods/log"
            return base
        except ApiException as err:
            why = f"pods/log: HTTP {err.status}"
        except Exception as err:  # noqa: BLE001 - urllib3 timeouts and socket errors alike
            why = f"pods/log: {type(err).__name__}"
        node = labels.get(keys.STAGE_NODE_LABEL, "")
        for root in sandbox_dirs:
            path = root / node / FLEETSIM_POD_LOGS / f"{name}.log"
            if path.is_file():
                base.text = path.read_text(encoding="utf-8", errors="replace")
                base.source = f"fleetsim log file {path} ({why})"
                return base
        base.text = message
        base.source = f"terminated container message, the log's last lines ({why})"
        return base

    def sandbox_dirs(self, node: str, extra: list[Path]) -> list[Path]:
        """Where fleetsim may keep the node's full logs: flags/env first, then fleetsim's default."""
        dirs = list(extra)
        if os.environ.get(SANDBOX_ENV):
            dirs.append(Path(os.environ[SANDBOX_ENV]))
        try:
            labels = self.core.read_node(node).metadata.labels or {}
        except ApiException:
            labels = {}
        if labels.get(FLEETSIM_LABEL) == "true" and labels.get(FLEETSIM_PREFIX_LABEL):
            dirs.append(FLEETSIM_DEFAULT_SANDBOX / labels[FLEETSIM_PREFIX_LABEL])
        return dirs


def is_finished(progress: RolloutProgress) -> bool:
    """Whether a rollout settled: phase Complete and every target node complete or erroring. Pure.

    Blocked nodes are not settled: a node blocked by a passing taint (say `not-ready` during another
    package's reboot) is targeted again when the rollout re-lists; skipped ones are asked again.
    """
    settled = sum(int(progress.counts.get(state, 0)) for state in ("complete", "erroring"))
    return progress.phase is RolloutPhase.COMPLETE and settled >= progress.total_nodes
