"""The six components of the local stack: their command lines, default ports and health checks.

Pure command-line construction plus small health probes (HTTP, and the Temporal CLI for the
Temporal frontend). The order of `COMPONENTS` is the start order; `down` stops in reverse.
Does I/O only in the probes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from localstack.pki import SERVICE_CLUSTER_IP_RANGE, Pki
from localstack.processes import http_ok, https_ok
from protocol.names import SEARCH_ATTRIBUTE_TYPES

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
TEMPORAL = "temporal"
# `noderoll webhook`, run as `python -m webhook` (the module is also its name in the process table).
WEBHOOK = "webhook"
LOCALHOST = "127.0.0.1"

# Controllers that need a cloud provider (load balancers, routes, cloud node lifecycle) are off;
# everything else of `*` (Jobs, disruption, node lifecycle, garbage collector, tokens...) is on.
CONTROLLERS = "*,-cloud-node-lifecycle,-route,-service"
# Admission plugins enabled on top of 1.20's defaults (NamespaceLifecycle, LimitRanger,
# ServiceAccount, Priority, DefaultTolerationSeconds, ResourceQuota, webhooks, ...).
EXTRA_ADMISSION_PLUGINS = "NodeRestriction"


@dataclass(frozen=True)
class Binaries:
    """Where each executable lives (see `localstack.provision`)."""

    etcd: Path
    k8s_dir: Path
    temporal: Path


@dataclass(frozen=True)
class StackLayout:
    """Everything a command line needs: binaries, state dir, PKI, and the ports of every component."""

    binaries: Binaries
    state_dir: Path
    pki: Pki
    ports: dict[str, dict[str, int]] = field(default_factory=dict)

    def port(self, component: str, name: str) -> int:
        return self.ports[component][name]

    @property
    def apiserver_url(self) -> str:
        return f"https://{LOCALHOST}:{self.port(APISERVER, 'secure')}"

    @property
    def webhook_url(self) -> str:
        return f"https://{LOCALHOST}:{self.port(WEBHOOK, 'https')}"

    @property
    def temporal_address(self) -> str:
        return f"{LOCALHOST}:{self.port(TEMPORAL, 'frontend')}"

    @property
    def temporal_ui(self) -> str:
        return f"http://{LOCALHOST}:{self.port(TEMPORAL, 'ui')}"


def _etcd(layout: StackLayout) -> list[str]:
    client = f"http://{LOCALHOST}:{layout.port(ETCD, 'client')}"
    peer = f"http://{LOCALHOST}:{layout.port(ETCD, 'peer')}"
    return [
        str(layout.binaries.etcd),
        "--name=noderoll",
        f"--data-dir={layout.state_dir / 'data' / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=noderoll={peer}",
        "--logger=zap",
        "--log-level=warn",
        # A dev store: 2 GiB is plenty and keeps etcd from growing unnoticed.
        "--quota-backend-bytes=2147483648",
        # Raft entries kept in memory between snapshots: etcd 3.4 (Debian's) keeps 100,000, which with
        # a fleet's Node status writes holds hundreds of MiB; 10,000 is etcd 3.5's default (issue 14:
        # apiserver + etcd memory during a 1,000-node rollout).
        "--snapshot-count=10000",
    ]


def _apiserver(layout: StackLayout) -> list[str]:
    pki = layout.pki
    return [
        str(layout.binaries.k8s_dir / APISERVER),
        f"--etcd-servers=http://{LOCALHOST}:{layout.port(ETCD, 'client')}",
        f"--bind-address={LOCALHOST}",
        f"--advertise-address={LOCALHOST}",
        f"--secure-port={layout.port(APISERVER, 'secure')}",
        f"--cert-dir={layout.state_dir / 'data' / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        # Without a request-header CA the controller manager and scheduler log an error every few
        # seconds; no front-proxy certificate is issued, so no client can use these headers.
        f"--requestheader-client-ca-file={pki.ca_cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={EXTRA_ADMISSION_PLUGINS}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--api-audiences=https://kubernetes.default.svc.cluster.local",
        # Stage pods mount the host root; simulated kubelets run them.
        "--allow-privileged=true",
        # The endpoint of the `kubernetes` Service would be 127.0.0.1, which Endpoints refuse; no pod
        # here reaches the apiserver through that Service, so it is not reconciled at all.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        "--v=1",
    ]


def _controller_manager(layout: StackLayout) -> list[str]:
    pki = layout.pki
    kubeconfig = pki.kubeconfig("controller-manager")
    return [
        str(layout.binaries.k8s_dir / CONTROLLER_MANAGER),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOCALHOST}",
        f"--secure-port={layout.port(CONTROLLER_MANAGER, 'secure')}",
        "--port=0",
        f"--cert-dir={layout.state_dir / 'data' / 'controller-manager-certs'}",
        # Without these two the token controller creates no service-account tokens, so no pod.
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_cert}",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        "--use-service-account-credentials=true",
        # Simulated kubelets heartbeat rarely; see docs/architecture.md "The local stack".
        "--node-monitor-grace-period=300s",
        f"--controllers={CONTROLLERS}",
        "--leader-elect=false",
        # Fleets of simulated nodes produce bursts of pods and Jobs.
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--v=1",
    ]


def _scheduler(layout: StackLayout) -> list[str]:
    kubeconfig = layout.pki.kubeconfig("scheduler")
    return [
        str(layout.binaries.k8s_dir / SCHEDULER),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOCALHOST}",
        f"--secure-port={layout.port(SCHEDULER, 'secure')}",
        "--port=0",
        f"--cert-dir={layout.state_dir / 'data' / 'scheduler-certs'}",
        "--leader-elect=false",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--v=1",
    ]


def _temporal(layout: StackLayout) -> list[str]:
    argv = [
        str(layout.binaries.temporal),
        "server",
        "start-dev",
        f"--ip={LOCALHOST}",
        f"--port={layout.port(TEMPORAL, 'frontend')}",
        f"--ui-port={layout.port(TEMPORAL, 'ui')}",
        f"--http-port={layout.port(TEMPORAL, 'http')}",
        f"--metrics-port={layout.port(TEMPORAL, 'metrics')}",
        f"--db-filename={layout.state_dir / 'data' / 'temporal.db'}",
        "--ui-disable-news-fetch",
        "--log-level=warn",
    ]
    for name, kind in SEARCH_ATTRIBUTE_TYPES.items():
        argv.append(f"--search-attribute={name}={kind}")
    return argv


def _webhook(layout: StackLayout) -> list[str]:
    # This interpreter: the one that has noderoll installed (scripts/bootstrap's .venv).
    return [
        sys.executable, "-m", WEBHOOK,
        f"--bind-address={LOCALHOST}",
        f"--port={layout.port(WEBHOOK, 'https')}",
        f"--tls-cert={layout.pki.webhook_cert}",
        f"--tls-key={layout.pki.webhook_key}",
        f"--kubeconfig={layout.state_dir / 'kubeconfig'}",
    ]


def _temporal_cli(layout: StackLayout, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(layout.binaries.temporal), *args, f"--address={layout.temporal_address}", "--command-timeout=3s"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


# The CLI's JSON names indexed value types by enum name.
_CLI_TYPE_NAMES = {"Keyword": "INDEXED_VALUE_TYPE_KEYWORD", "KeywordList": "INDEXED_VALUE_TYPE_KEYWORD_LIST"}


class SearchAttributeTypeError(RuntimeError):
    """A search attribute exists with another type than noderoll needs (an older dev server db)."""


def temporal_search_attributes(layout: StackLayout) -> dict[str, str]:
    """Custom search attributes the dev server knows: name -> indexed value type (as the CLI prints it)."""
    result = _temporal_cli(layout, "operator", "search-attribute", "list", "--output=json")
    if result.returncode != 0:
        return {}
    try:
        data = json.loads(result.stdout)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in (data.get("customAttributes") or {}).items()}


def register_search_attributes(layout: StackLayout) -> None:
    """Add any of noderoll's search attributes the server lacks (a reused older db, say).

    Raises `SearchAttributeTypeError` when one exists with another type: `NoderollPackage` became a
    keyword list with fleet rollouts, and a type cannot be changed in place.
    """
    known = temporal_search_attributes(layout)
    for name, kind in SEARCH_ATTRIBUTE_TYPES.items():
        found = known.get(name)
        if found is not None and found not in (kind, _CLI_TYPE_NAMES[kind]):
            raise SearchAttributeTypeError(
                f"search attribute {name} is {found} in {layout.state_dir / 'data' / 'temporal.db'}, noderoll needs "
                f"{kind}; start over with `noderoll dev down --purge` (drops the dev server's database)")
    missing = [n for n in SEARCH_ATTRIBUTE_TYPES if n not in known]
    if missing:
        args = ["operator", "search-attribute", "create", "--yes"]
        for name in missing:
            args += [f"--name={name}", f"--type={SEARCH_ATTRIBUTE_TYPES[name]}"]
        _temporal_cli(layout, *args)


def _temporal_healthy(layout: StackLayout) -> bool:
    if not http_ok(layout.temporal_ui + "/"):
        return False
    health = _temporal_cli(layout, "operator", "cluster", "health")
    return health.returncode == 0 and "SERVING" in health.stdout


def _https_health(component: str, path: str) -> Callable[[StackLayout], bool]:
    def check(layout: StackLayout) -> bool:
        return https_ok(f"https://{LOCALHOST}:{layout.port(component, 'secure')}{path}")

    return check


@dataclass(frozen=True)
class Component:
    """A component: default ports, command line and readiness probe."""

    name: str
    default_ports: dict[str, int | None]
    argv: Callable[[StackLayout], list[str]]
    healthy: Callable[[StackLayout], bool]
    # Readiness budget in seconds after a start (the apiserver's first start bootstraps RBAC).
    start_timeout: float = 60.0


COMPONENTS: tuple[Component, ...] = (
    Component(
        ETCD,
        {"client": 2379, "peer": 2380},
        _etcd,
        lambda layout: http_ok(f"http://{LOCALHOST}:{layout.port(ETCD, 'client')}/health"),
    ),
    Component(
        TEMPORAL,
        {"frontend": 7233, "ui": 8233, "http": None, "metrics": None},
        _temporal,
        _temporal_healthy,
    ),
    Component(APISERVER, {"secure": 6443}, _apiserver, _https_health(APISERVER, "/readyz"), 120.0),
    Component(CONTROLLER_MANAGER, {"secure": 10257}, _controller_manager, _https_health(CONTROLLER_MANAGER, "/healthz")),
    Component(SCHEDULER, {"secure": 10259}, _scheduler, _https_health(SCHEDULER, "/healthz")),
    Component(WEBHOOK, {"https": 9443}, _webhook,
              lambda layout: https_ok(f"{layout.webhook_url}/healthz"), 30.0),
)
EXECUTABLES = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, TEMPORAL, WEBHOOK)
