"""Shared Temporal and Kubernetes access of the ops commands and the demo. Does I/O.

The commands talk to the cluster the way the bridge does: the `progress` query and the contract
signals (`pause`, `resume`, `halt`, `retry`) on `package/<name>`, the Package objects, the
`noderoll.io/state` annotation of every Node, and the stage Jobs' pods in `noderoll-system`.

Where a value comes from is always reported (`source` fields), because there are fallbacks:
* progress: the rollout's `progress` query; when the workflow cannot answer (no worker running,
  no rollout yet) the Package's status subresource that the bridge wrote from that same query;
* a stage log: the pod log (`pods/log`, needs a kubelet); else the last lines the kubelet (or
  fleetsim) kept in `state.terminated.message`; and, on a fleetsim node whose sandbox is on this
  machine, fleetsim's full copy of the log.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from activities.jobs import pod_outcome
from api import keys
from api.enums import CanaryPhase, RolloutPhase
from api.node_state import NodeState, PackageNodeState, parse_node_state
from api.package import Limits
from api.status import PackageStatus
from localstack.state import resolve_connection
from planning.drain import DrainBlock, DrainCondition, drain_block, read_drain_condition
from planning.status import RolloutProgress, package_view
from worker.temporal_client import connect

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
LABEL_PACKAGE = "noderoll.io/package"
LABEL_NODE = "noderoll.io/node"
LABEL_MODE = "noderoll.io/mode"


class OpsError(RuntimeError):
    """A command cannot do what was asked; the message says why and what to do."""


@dataclass(frozen=True)
class OpsTarget:
    """Where the commands connect."""

    temporal_address: str
    namespace: str
    kubeconfig: str | None
    source: str


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """The common connection flags (docs/architecture.md "CLI")."""
    parser.add_argument("--temporal-address", default=None,
                        help="host:port of Temporal (env NODEROLL_TEMPORAL_ADDRESS; default: dev stack)")
    parser.add_argument("--temporal-namespace", default=os.environ.get("NODEROLL_TEMPORAL_NAMESPACE",
                                                                       keys.DEFAULT_NAMESPACE),
                        help="Temporal namespace (env NODEROLL_TEMPORAL_NAMESPACE)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (env KUBECONFIG; default: dev stack)")
    parser.add_argument("--state-dir", default=None, help="dev stack state dir (env NODEROLL_STATE_DIR)")


def target_from_args(args: argparse.Namespace) -> OpsTarget:
    """Flags, then environment, then a running dev stack; an OpsError when Temporal is unknown."""
    connection = resolve_connection(args.temporal_address, args.kubeconfig, args.state_dir)
    if connection.temporal_address is None:
        raise OpsError("no Temporal address: use --temporal-address, NODEROLL_TEMPORAL_ADDRESS, "
                       "or start a stack with `noderoll dev up` (or `noderoll demo --keep`)")
    return OpsTarget(connection.temporal_address, args.temporal_namespace, connection.kubeconfig,
                     connection.source)


@dataclass
class PackageView:
    """A Package's rollout as the commands show it."""

    name: str
    progress: RolloutProgress
    # "temporal query" or "Package status" (the bridge's copy of the query).
    source: str
    exists: bool = True
    # Target nodes whose drain waits on someone else's pods (read from the Nodes, `drain_blocks`).
    drain_blocked: list[DrainBlock] = field(default_factory=list)
    # The Package's spec.limits (None: not read, e.g. in the table of every Package).
    limits: Limits | None = None


@dataclass
class NodeView:
    """One Node: its noderoll status label, cordon and readiness, and every package recorded on it."""

    name: str
    status: str
    ready: bool
    cordoned: bool
    cordoned_by_noderoll: bool
    packages: dict[str, PackageNodeState] = field(default_factory=dict)
    # Set when the state annotation is unreadable (then `packages` is empty).
    state_problem: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # The `noderoll.io/Draining` condition (None: the node was never drained by noderoll).
    drain: DrainCondition | None = None


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
        message=parsed.message,
    )


def node_view(node: k8s.V1Node) -> NodeView:
    """Read one Node object into a NodeView. Pure."""
    meta, spec = node.metadata, node.spec
    annotations, labels = meta.annotations or {}, meta.labels or {}
    state, problem = parse_node_state(annotations.get(keys.NODE_STATE_ANNOTATION))
    conditions = (node.status.conditions or []) if node.status else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    drain = read_drain_condition(
        {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
         "lastTransitionTime": c.last_transition_time.isoformat() if c.last_transition_time else ""}
        for c in conditions
    )
    return NodeView(
        name=meta.name,
        status=labels.get(keys.NODE_STATUS_LABEL, ""),
        ready=ready,
        cordoned=bool(spec and spec.unschedulable),
        cordoned_by_noderoll=annotations.get(keys.CORDONED_BY_ANNOTATION) == keys.CORDONED_BY_VALUE,
        packages=dict((state or NodeState()).packages),
        state_problem=problem,
        labels=dict(labels),
        drain=drain,
    )


def drain_blocks(package: str, nodes: list[NodeView]) -> list[DrainBlock]:
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


class Ops:
    """A connected pair of clients (Temporal, Kubernetes) with the commands' reads and writes."""

    def __init__(self, target: OpsTarget, temporal: Client, api: k8s.ApiClient) -> None:
        self.target = target
        self.temporal = temporal
        self.api = api
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)

    @classmethod
    async def connect(cls, target: OpsTarget) -> Ops:
        """Connect to Temporal and build the Kubernetes client (kubeconfig, else in-cluster)."""
        try:
            temporal = await connect(target.temporal_address, target.namespace)
        except RuntimeError as err:
            raise OpsError(f"cannot reach Temporal at {target.temporal_address}: {err}") from err
        if target.kubeconfig:
            api = k8s_config.new_client_from_config(config_file=target.kubeconfig)
        else:
            configuration = k8s.Configuration()
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except k8s_config.ConfigException as err:
                raise OpsError("no kubeconfig: use --kubeconfig, KUBECONFIG, or start a stack with "
                               "`noderoll dev up`") from err
            api = k8s.ApiClient(configuration)
        return cls(target, temporal, api)

    def close(self) -> None:
        """Release the Kubernetes connection pool."""
        self.api.close()

    # --- Temporal --------------------------------------------------------------------------

    def rollout(self, package: str) -> WorkflowHandle[Any, Any]:
        """The handle of `package/<name>` (latest run)."""
        return self.temporal.get_workflow_handle(keys.rollout_workflow_id(package))

    async def query_progress(self, package: str) -> RolloutProgress:
        """The rollout's `progress` query; raises RPCError when the workflow cannot answer."""
        return await self.rollout(package).query(
            keys.QUERY_PROGRESS, result_type=RolloutProgress, rpc_timeout=QUERY_TIMEOUT
        )

    async def package_view(self, package: str) -> PackageView:
        """Progress from the query, else from the Package status; OpsError when neither exists."""
        try:
            # As the Package shows it (phase `Blocked`, blocked nodes named), like the bridge's status.
            return PackageView(package, package_view(await self.query_progress(package)), "temporal query")
        except RPCError as err:
            query_error = err
        obj = self.read_package(package)
        if obj is None:
            raise OpsError(f"no rollout {keys.rollout_workflow_id(package)} ({query_error.message}) "
                           f"and no Package {package}")
        progress = progress_from_status(obj.get("status") or {})
        return PackageView(package, progress, f"Package status (query failed: {query_error.message})")

    async def signal(self, package: str, name: str, payload: dict[str, Any] | None = None) -> None:
        """Send a contract signal to the rollout; OpsError naming the workflow when it is not running.

        `payload` is JSON: the rollout's handler decodes it into its own type (for `retry`,
        `workflows.messages.RetryRequest`: `{"nodes": [...]}`), so this client needs no workflow import.
        """
        handle = self.rollout(package)
        try:
            if payload is None:
                await handle.signal(name)
            else:
                await handle.signal(name, payload)
        except RPCError as err:
            raise OpsError(f"cannot signal {name} to {handle.id}: {err.message} "
                           "(is the Package applied and `noderoll bridge` running?)") from err

    # --- Kubernetes ------------------------------------------------------------------------

    def list_packages(self) -> list[dict[str, Any]]:
        """Every Package object, sorted by name."""
        result = self.custom.list_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL)
        return sorted(result.get("items") or [], key=lambda o: o["metadata"]["name"])

    def set_pause_annotation(self, name: str, paused: bool) -> dict[str, Any] | None:
        """Set or remove `noderoll.io/pause` on the Package (the lasting switch the bridge maps to pause).

        Returns the updated Package, or None when there is no such Package.
        """
        patch = {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: "true" if paused else None}}}
        try:
            obj: dict[str, Any] = self.custom.patch_cluster_custom_object(
                keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name, patch)
            return obj
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def read_package(self, name: str) -> dict[str, Any] | None:
        """One Package object, or None when it does not exist."""
        try:
            obj: dict[str, Any] = self.custom.get_cluster_custom_object(
                keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name)
            return obj
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def package_limits(self, name: str) -> Limits | None:
        """The Package's `spec.limits` (unset fields None), or None when there is no such Package."""
        obj = self.read_package(name)
        if obj is None:
            return None
        try:
            return Limits.model_validate((obj.get("spec") or {}).get("limits") or {})
        except ValidationError:
            return Limits()  # stored before the webhook with out-of-range values: the bridge reports them

    def list_nodes(self, selector: str | None = None) -> list[NodeView]:
        """Every Node (optionally by label selector), sorted by name."""
        nodes = self.core.list_node(label_selector=selector or "").items
        return sorted((node_view(n) for n in nodes), key=lambda v: v.name)

    def stage_pods(self, package: str, node: str) -> list[k8s.V1Pod]:
        """The stage pods of `package` on `node`, oldest first."""
        selector = f"{LABEL_PACKAGE}={package},{LABEL_NODE}={node}"
        pods = self.core.list_namespaced_pod(keys.PACKAGE_POD_NAMESPACE, label_selector=selector).items
        return sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))

    def stage_log(self, pod: k8s.V1Pod, sandbox_dirs: list[Path]) -> StageLog:
        """The pod's log from the best source available (see the module docstring)."""
        name, labels = pod.metadata.name, pod.metadata.labels or {}
        exit_code, message, container = _pod_exit(pod)
        base = StageLog(name, container or labels.get(LABEL_MODE, ""), pod.status.phase if pod.status else "",
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
        node = labels.get(LABEL_NODE, "")
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
