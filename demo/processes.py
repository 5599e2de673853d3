"""What the demo starts and stops: worker, bridge and fleet processes, workloads, CRs, and its record. Does I/O.

The three processes are the real commands (`noderoll worker`, `noderoll bridge`, `noderoll sim`),
started detached with localstack's process supervision and recorded in `<state-dir>/demo/demo.json`,
so `noderoll demo --stop` can stop what a `--keep` run left behind. Every process gets the stack's
Temporal address and kubeconfig explicitly: a `KUBECONFIG` in the user's environment pointing at a
real cluster must never receive the demo.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client
from temporalio.service import RPCError

from api import keys
from demo.resources import GPU_LABEL, GPUS_PER_NODE, RACK_LABEL, DemoNames, DemoObjects, racks_for
from fleetsim.context import PREFIX_LABEL
from fleetsim.kube import Kube
from fleetsim.workloads import WorkloadSpec, create_workloads
from localstack import processes
from localstack.state import ComponentInfo, StackInfo
from protocol import names

RECORD = "demo.json"
# Short fleetsim timings: the demo is watched by a person (or CI) and must end in minutes.
REBOOT_SECONDS = 2.0
MAX_GRACE_SECONDS = 3.0
TRAINING_SECONDS = 20.0


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where its log is."""


@dataclass
class DemoRecord:
    """What a demo run started (`demo.json`)."""

    state_dir: str
    # Logs, sandboxes and this record (`<state-dir>/demo` for `noderoll demo`).
    run_dir: str
    started_stack: bool
    names_suffix: str
    packages: list[str]
    policy: str
    task_queue: str
    components: dict[str, ComponentInfo] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    sandbox_dir: str = ""

    def save(self) -> None:
        """Write `<run-dir>/demo.json`."""
        path = Path(self.run_dir) / RECORD
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, run_dir: Path) -> DemoRecord | None:
        """The record of the last demo in `run_dir`, or None."""
        try:
            data = json.loads((run_dir / RECORD).read_text())
            data["components"] = {k: ComponentInfo(**v) for k, v in data.get("components", {}).items()}
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def forget(self) -> None:
        """Delete the record (everything in it was stopped)."""
        (Path(self.run_dir) / RECORD).unlink(missing_ok=True)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


@dataclass(frozen=True)
class DemoLaunch:
    """How to start the demo's processes."""

    stack: StackInfo
    names: DemoNames
    nodes: int
    task_queue: str
    faults: Path | None = None


def start_processes(launch: DemoLaunch, record: DemoRecord) -> None:
    """Start worker, bridge and fleet; record each as soon as it runs (so a failure can stop it)."""
    stack, logs = launch.stack, Path(record.run_dir)
    connect = ["--temporal-address", stack.temporal_address, "--kubeconfig", stack.kubeconfig,
               "--task-queue", launch.task_queue]
    sandbox = logs / "sandboxes" / launch.names.node_prefix
    record.sandbox_dir = str(sandbox)
    sim = ["sim", "--nodes", str(launch.nodes), "--kubeconfig", stack.kubeconfig,
           "--name-prefix", launch.names.node_prefix, "--labels", "=".join(GPU_LABEL),
           "--sandbox-dir", str(sandbox), "--reboot-seconds", str(REBOOT_SECONDS),
           "--max-grace-seconds", str(MAX_GRACE_SECONDS), "--delete-on-exit",
           "--gpus", str(GPUS_PER_NODE), "--racks", str(racks_for(launch.nodes)), "--rack-label", RACK_LABEL]
    if launch.faults is not None:
        sim += ["--faults", str(launch.faults.resolve())]
    plans: list[tuple[str, list[str], dict[str, int]]] = []
    # One bridge per demo, for the demo's own objects only: no Lease to wait for, and Packages of
    # other users of the cluster are left to their own bridge.
    bridge = ["--no-leader-election", "--label-selector", launch.names.selector]
    for name, extra in (("worker", []), ("bridge", bridge)):
        port = free_port()
        plans.append((name, _cli(name, *connect, "--metrics-port", str(port), *extra), {"metrics": port}))
        record.metrics[name] = f"http://127.0.0.1:{port}/metrics"
    plans.append(("fleet", _cli(*sim), {}))
    for name, argv, ports in plans:
        info = processes.start(processes.Launch(f"demo-{name}", argv, ports, logs / f"{name}.log"))
        record.components[name] = info
        record.save()


def check_alive(record: DemoRecord) -> None:
    """DemoError naming the first recorded process that exited, with its log's last lines."""
    for name, info in record.components.items():
        if not info.is_alive():
            try:
                tail = "\n".join("    " + line for line in Path(info.log).read_text(errors="replace").splitlines()[-12:])
            except OSError:
                tail = ""
            raise DemoError(f"the demo's {name} process exited; see {info.log}\n{tail}")


def stop_processes(record: DemoRecord) -> int:
    """Stop every recorded process (fleet first, so its nodes are deleted while the API still answers)."""
    stopped = processes.stop_all([record.components[n] for n in ("fleet",) if n in record.components], timeout=20)
    return stopped + processes.stop_all([c for n, c in record.components.items() if n != "fleet"])


def wait_for_fleet(core: k8s.CoreV1Api, launch: DemoLaunch, record: DemoRecord, timeout: float = 180.0) -> list[str]:
    """Wait until the fleet's nodes are registered and Ready; their names in order."""
    deadline = time.monotonic() + timeout
    selector = f"{PREFIX_LABEL}={launch.names.node_prefix}"
    while True:
        check_alive(record)
        nodes = core.list_node(label_selector=selector).items
        ready = sorted(n.metadata.name for n in nodes if any(
            c.type == "Ready" and c.status == "True" for c in (n.status.conditions or [])))
        if len(ready) >= launch.nodes:
            return ready
        if time.monotonic() > deadline:
            raise DemoError(f"only {len(ready)}/{launch.nodes} simulated nodes Ready after {timeout:.0f}s; "
                            f"see {record.components['fleet'].log}")
        time.sleep(1.0)


def start_workloads(core: k8s.CoreV1Api, launch: DemoLaunch, nodes: list[str]) -> dict[str, int]:
    """Training pods (every other one protected) and Deployments with PDBs on the fleet."""
    namespace = launch.names.workload_namespace
    _create_namespace(core, namespace)
    # Kubernetes 1.20 refuses pods until the namespace's default service account has its token.
    deadline = time.monotonic() + 60
    while not _has_token(core, namespace):
        if time.monotonic() > deadline:
            raise DemoError(f"namespace {namespace} got no service-account token in 60s (controller manager?)")
        time.sleep(0.5)
    spec = WorkloadSpec(namespace=namespace, prefix=launch.names.node_prefix, nodes=nodes,
                        training_seconds=TRAINING_SECONDS, replicas=min(len(nodes), 3))
    return create_workloads(Kube(launch.stack.kubeconfig), spec)


def _create_namespace(core: k8s.CoreV1Api, namespace: str, timeout: float = 120.0) -> None:
    """Create the namespace; one still Terminating (an earlier demo's, deleted at its end) is waited out first.

    A Terminating namespace never gets a service-account token, so reusing it would fail the demo.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.create_namespace({"metadata": {"name": namespace}})
            return
        except ApiException as err:
            if err.status != 409:
                raise
        try:
            phase = core.read_namespace(namespace).status.phase
        except ApiException as err:
            if err.status == 404:
                continue  # gone between the two calls: create it now
            raise
        if phase != "Terminating":
            return
        if time.monotonic() > deadline:
            raise DemoError(f"namespace {namespace} (an earlier demo's) still Terminating after {timeout:.0f}s")
        time.sleep(1.0)


def _has_token(core: k8s.CoreV1Api, namespace: str) -> bool:
    try:
        return bool(core.read_namespaced_service_account("default", namespace).secrets)
    except ApiException:
        return False


def _apply(custom: k8s.CustomObjectsApi, plural: str, body: dict[str, Any]) -> None:
    """Create the object, or update its spec when it exists."""
    body = {"apiVersion": keys.API_VERSION, **body}
    name = body["metadata"]["name"]
    try:
        custom.create_cluster_custom_object(keys.GROUP, keys.VERSION, plural, body)
    except ApiException as err:
        if err.status != 409:
            raise DemoError(f"cannot create {plural}/{name}: HTTP {err.status} {err.body}") from err
        custom.patch_cluster_custom_object(keys.GROUP, keys.VERSION, plural, name, {"spec": body["spec"]})


def apply_objects(custom: k8s.CustomObjectsApi, objects: DemoObjects) -> None:
    """Create or update the policy, then the Packages, one right after the other.

    The bridge validates a Package against its policy. Packages applied together are meant to reach
    their fleet together and roll out as one wave; when the bridge hands them over in two passes the
    fleet runs two waves (the summary shows the waves; see tests/workflows/test_fleet_wave_race.py).
    """
    _apply(custom, keys.POLICY_PLURAL, objects.policy)
    for package in objects.packages:
        _apply(custom, keys.PACKAGE_PLURAL, package)


def delete_objects(api: k8s.ApiClient, record: DemoRecord) -> None:
    """Delete the demo's Packages (finalizers dropped: the bridge is already stopped), policy and workloads."""
    custom, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    targets = [(keys.PACKAGE_PLURAL, name) for name in record.packages] + [(keys.POLICY_PLURAL, record.policy)]
    for plural, name in targets:
        try:
            custom.patch_cluster_custom_object(keys.GROUP, keys.VERSION, plural, name,
                                               {"metadata": {"finalizers": None}})
            custom.delete_cluster_custom_object(keys.GROUP, keys.VERSION, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise
    try:
        core.delete_namespace(DemoNames(record.names_suffix).workload_namespace)
    except ApiException as err:
        if err.status != 404:
            raise


async def terminate_workflows(temporal: Client, record: DemoRecord, nodes: list[str]) -> int:
    """Terminate the demo's fleet and node workflows (nothing would ever run them again)."""
    ids = [names.fleet_workflow_id(record.policy)] + [names.node_workflow_id(n) for n in nodes]
    ended = 0
    for workflow_id in ids:
        try:
            await temporal.get_workflow_handle(workflow_id).terminate(reason="noderoll demo finished")
            ended += 1
        except RPCError:
            continue  # already closed or never started
    return ended


def failed_pods(core: k8s.CoreV1Api, nodes: set[str], packages: set[str], since: datetime) -> dict[str, int]:
    """Failed stage pods of the demo's Packages on its nodes created since `since` (an earlier demo on the
    same stack used the same names), per package. A window deletes its stage pods once their outcome
    is on the node and keeps the latest failed one of an erroring package (issue #14): this counts
    those, one per erroring node."""
    pods = core.list_namespaced_pod(keys.PACKAGE_POD_NAMESPACE,
                                    label_selector=f"{keys.STAGE_COMPONENT_LABEL}={keys.STAGE_COMPONENT}").items
    failed: dict[str, int] = {}
    for pod in pods:
        labels: dict[str, Any] = pod.metadata.labels or {}
        node, package = labels.get(keys.STAGE_NODE_LABEL), labels.get(keys.STAGE_PACKAGE_LABEL)
        created = pod.metadata.creation_timestamp
        if node not in nodes or package not in packages or created is None or created < since.replace(microsecond=0):
            continue
        if pod.status is not None and pod.status.phase == "Failed":
            failed[package] = failed.get(package, 0) + 1
    return failed


def count_interrupts(sandbox_dir: str, nodes: set[str], since: datetime) -> dict[str, int]:
    """Interrupts the agent recorded on each node's host since `since` (its `interrupts.log` in the
    fleet's sandbox): what ran on the nodes, whatever noderoll counted."""
    counts: dict[str, int] = {}
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    for node in nodes:
        log = Path(sandbox_dir) / node / "var" / "lib" / "noderoll" / "interrupts.log"
        lines = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
        counts[node] = sum(1 for line in lines if json.loads(line).get("time", "") >= stamp)
    return counts


def count_cordon_events(core: k8s.CoreV1Api, nodes: set[str], since: datetime) -> dict[str, int]:
    """Cordons noderoll recorded on the demo's nodes since `since`: the `count` of each node's `Cordoned`
    Event (one Event per node, raised by each cordon; issue #14; a node of an earlier demo under the
    same name had another uid, so another Event)."""
    events = core.list_namespaced_event(keys.EVENT_NAMESPACE, field_selector="involvedObject.kind=Node,reason=Cordoned")
    counts: dict[str, int] = {}
    for event in events.items:
        node = event.involved_object.name
        at = event.first_timestamp or event.event_time or (event.metadata.creation_timestamp if event.metadata else None)
        if node in nodes and at is not None and at >= since.replace(microsecond=0):
            counts[node] = counts.get(node, 0) + (event.count or 1)
    return counts
