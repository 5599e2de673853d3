"""Analysis gates against a real Prometheus and maintenance windows on the real stack.

`noderoll worker` (with `NODEROLL_PROMETHEUS_ADDRESS`) and `noderoll bridge` processes, fleetsim
nodes, and a real Prometheus server (Debian's `prometheus`, installed by `localstack.prometheus`
when missing; the module skips with the reason when it cannot be had) scraping an exporter this
test controls (`prometheus_client.start_http_server` in this process, a gauge per test):

* a gate fails when the exporter reports a bad value: the fleet halts after its canary with the
  query, the value and the time in the DeploymentPolicy's and the Package's status, and a Warning
  Event `GateFailed` on the policy; once the exporter recovers and `resume` is sent, the later
  evaluations pass on the recovered value and every node is updated;
* a maintenance window that opens about a minute later (time zone Asia/Kolkata, UTC+05:30): the
  fleet reports `Waiting` with `status.nextWindow` on the policy and the Package, no node gets a
  window before the opening, and every node is updated after it.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from temporalio.client import Client

from localstack.prometheus import PrometheusServer, free_port, prometheus_binary
from localstack.provision import ProvisionError
from localstack.state import StackInfo
from planning.views.fleet_status import FleetProgress
from protocol import names
from tests.helpers import assert_eventually, assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_processes
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
    kubectl_wait_ready,
    policy_events,
    read_package,
    read_policy,
)

pytestmark = pytest.mark.integration
METRIC = "noderoll_test_gpu_errors"
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@pytest.fixture(scope="module")
def exporter() -> Iterator[tuple[str, Gauge]]:
    """An exporter this test controls: (host:port, a gauge labelled by fleet)."""
    registry = CollectorRegistry()
    gauge = Gauge(METRIC, "GPU errors the test pretends to see", ["fleet"], registry=registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{port}", gauge
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def prometheus(exporter: tuple[str, Gauge]) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping the exporter every second."""
    try:
        binary = prometheus_binary()
    except ProvisionError as err:
        pytest.skip(f"no Prometheus server here: {err}")
    server = PrometheusServer([exporter[0]], binary).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def run(local_stack: StackInfo, prometheus: PrometheusServer,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[NoderollProcesses]:
    """Worker (told where Prometheus is by its environment) and bridge processes for this module."""
    worker_env = {"NODEROLL_PROMETHEUS_ADDRESS": prometheus.address}
    with noderoll_processes(local_stack, tmp_path_factory.mktemp("gates"), worker_env) as procs:
        yield procs


def window_events(api: ApiClient, node: str) -> list[client.CoreV1Event]:
    """The `WindowStarted` Event of `node` (one per node, counting its windows: issue #14)."""
    selector = f"involvedObject.name={node},reason=WindowStarted"
    return list(client.CoreV1Api(api).list_namespaced_event("default", field_selector=selector).items)


def _completed(status: dict[str, Any]) -> dict[str, Any]:
    assert status.get("phase") == "Complete", status
    return status


def prometheus_value(server: PrometheusServer, query: str) -> list[str]:
    """What Prometheus answers for `query` now (the values of the vector)."""
    url = f"{server.address}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        data = json.load(answer)["data"]
    return [item["value"][1] for item in data["result"]]


async def test_gate_halts_on_a_bad_value_and_passes_after_it_recovers_and_resume(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
    prometheus: PrometheusServer, exporter: tuple[str, Gauge],
) -> None:
    labels = {"gate-test": unique_name("g")}
    policy, name = unique_name("pol"), unique_name("pkg")
    query = f'max({METRIC}{{fleet="{policy}"}})'
    gauge = exporter[1].labels(fleet=policy)
    gauge.set(3)
    assert_eventually(lambda: prometheus_value(prometheus, query) == ["3"], timeout=60)
    with running_fleet(local_stack, nodes=3, labels=labels):
        try:
            create_policy(kube_api_client, run, policy, {
                "canary": {"count": 1, "soakSeconds": 1},
                "default": {"budget": {"count": 1}, "strategy": {"type": "fixed", "initialBatch": 1}},
                "analysis": [{"name": "gpu-errors", "query": query, "successCondition": "result < 1",
                              "intervalSeconds": 2}],
            })
            create_package(kube_api_client, run.package(name, package_spec(policy=policy, labels=labels)))

            def halted() -> dict[str, Any]:
                status = read_policy(kube_api_client, policy).get("status") or {}
                assert status.get("phase") == "Halted" and status.get("gateFailure"), status
                return status

            status = assert_eventually(halted, timeout=240)
            failure = status["gateFailure"]
            assert (failure["gate"], failure["query"], failure["value"], failure["condition"]) == (
                "gpu-errors", query, "3", "result < 1")
            at = datetime.fromisoformat(failure["time"])
            assert abs(datetime.now(UTC) - at) < timedelta(minutes=5)
            assert f"gate gpu-errors failed at {failure['time']}: {query} = 3" in status["message"]
            package = read_package(kube_api_client, name)["status"]
            assert package["phase"] == "Halted" and package["gateFailure"] == failure, package
            assert query in package["message"]
            assert package["progress"] == "1/3"  # only the canary was updated
            # Waited for: the bridge emits its Events from a thread after the status write, which they may
            # lag (seen: the Halted status read, no Event yet); an empty list keeps assert_eventually waiting.
            events = assert_eventually(lambda: policy_events(kube_api_client, policy, "GateFailed"), timeout=60)
            assert len(events) == 1 and events[0].type == "Warning" and query in events[0].message

            # The exporter recovers; once Prometheus has it, resume overrides the failed evaluation once.
            gauge.set(0)
            assert_eventually(lambda: prometheus_value(prometheus, query) == ["0"], timeout=60)
            await temporal_client.get_workflow_handle(names.fleet_workflow_id(policy)).signal(names.SIGNAL_RESUME)
            kubectl_wait_ready(local_stack, name, timeout=240)
            report: FleetProgress = await fleet_progress(temporal_client, policy)
            track = report.gates["gpu-errors"]
            assert track.passed and track.last_value == "0", track  # a later evaluation passed on its own
            # Waited for: a Package is Complete once its nodes are (`planning.views.fleet_status._package_phase`),
            # the policy once its fleet has ended the wave (the fleet's own phase, set in a later
            # workflow task and shown from the bridge's next poll), and the bridge writes the two objects
            # one after the other: a read right after the Package turned Ready saw the policy still
            # Progressing once (clean-clone run of b96abcc).
            status = assert_eventually(lambda: _completed(read_policy(kube_api_client, policy)["status"]),
                                       timeout=30)
            assert "gateFailure" not in status, status
            assert len(policy_events(kube_api_client, policy, "GateFailed")) == 1
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)


async def test_fleet_waits_for_the_maintenance_window_then_rolls_out(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client,
) -> None:
    labels = {"window-test": unique_name("w")}
    policy, name = unique_name("pol"), unique_name("pkg")
    zone = ZoneInfo("Asia/Kolkata")
    opening = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=2)
    local = opening.astimezone(zone)
    window = {"days": [DAYS[local.weekday()]], "start": f"{local:%H:%M}",
              "end": f"{local + timedelta(minutes=20):%H:%M}", "timeZone": "Asia/Kolkata"}
    with running_fleet(local_stack, nodes=2, labels=labels) as fleet:
        try:
            create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 2}},
                                                         "maintenanceWindows": [window]})
            create_package(kube_api_client, run.package(name, package_spec(policy=policy, labels=labels)))

            def waiting() -> tuple[dict[str, Any], dict[str, Any]]:
                status = read_policy(kube_api_client, policy).get("status") or {}
                package = read_package(kube_api_client, name).get("status") or {}
                assert status.get("phase") == "Waiting" and package.get("phase") == "Waiting", (status, package)
                return status, package

            status, package = assert_eventually(waiting, timeout=90)
            assert datetime.now(UTC) < opening, "the stack was too slow to see the wait before the opening"
            assert datetime.fromisoformat(status["nextWindow"]) == opening
            assert datetime.fromisoformat(package["nextWindow"]) == opening
            assert f"({local:%a %H:%M} Asia/Kolkata)" in status["message"]
            assert all(window_events(kube_api_client, node) == [] for node in fleet.node_names)

            async def opened() -> bool:
                report = await fleet_progress(temporal_client, policy)
                assert report.counts.get("complete") == 2, report.counts
                return True

            kubectl_wait_ready(local_stack, name, timeout=300)
            await assert_eventually_async(opened, timeout=60)
            started = [e.first_timestamp for node in fleet.node_names for e in window_events(kube_api_client, node)]
            assert len(started) == 2 and all(t >= opening for t in started), (started, opening)
            status = read_policy(kube_api_client, policy)["status"]
            assert status["phase"] == "Complete" and "nextWindow" not in status, status
        finally:
            delete_package(kube_api_client, name)
            delete_policy(kube_api_client, policy)
