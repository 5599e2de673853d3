"""Both metrics endpoints serve the documented series during and after a real rollout.

`noderoll worker`, `noderoll bridge` and `noderoll sim` run as processes (the demo's launcher, each
with `--metrics-port`) on the session stack; one Package (the service-restart example: drain, stage
pods, a `service` interrupt, so budget leases are taken too) rolls over 3 simulated nodes. The test
scrapes `/metrics` of both processes over HTTP, as Prometheus would.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

import metrics
from api import keys
from demo import processes as procs
from demo.resources import DemoNames, DemoObjects, DemoTuning, demo_objects, fit_package
from localstack.state import StackInfo
from tests.helpers import assert_eventually, new_task_queue, unique_name

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
NODES = 3
ROLLOUT_TIMEOUT = 180.0
SERIES = re.compile(r"^(noderoll_[a-z_]+?)(_bucket|_sum|_count|_created)?(\{[^}]*\})? (\S+)$", re.MULTILINE)


@dataclass
class Running:
    package: str
    worker_url: str
    bridge_url: str


def scrape(url: str) -> dict[str, list[tuple[str, float]]]:
    """Series by metric name: [(labels, value)] (histogram suffixes folded into their metric)."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[str, float]]] = {}
    for name, suffix, labels, value in SERIES.findall(text):
        if suffix == "_created":
            continue
        out.setdefault(name, []).append((f"{suffix}{labels}", float(value)))
    return out


@pytest.fixture(scope="module")
def running(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    from kubernetes import config as k8s_config

    names = DemoNames("-" + unique_name("mx").split("-")[-1])
    run_dir = tmp_path_factory.mktemp("metrics-scrape")
    policy = demo_objects(names, DemoTuning(soak_seconds=1)).policy
    example = yaml.safe_load((ROOT / "deploy" / "examples" / "package-service-restart.yaml").read_text())
    objects = DemoObjects(policy, [fit_package(example, names, policy["metadata"]["name"])])
    objects.policy["spec"] = {"canary": {"count": 1, "soakSeconds": 1, "promotion": "auto"},
                              "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}}
    launch = procs.DemoLaunch(local_stack, names, NODES, new_task_queue(), None)
    record = procs.DemoRecord(local_stack.state_dir, str(run_dir), False, names.suffix, objects.package_names,
                              objects.policy["metadata"]["name"], launch.task_queue)
    api = k8s_config.new_client_from_config(config_file=local_stack.kubeconfig)
    try:
        procs.start_processes(launch, record)
        procs.wait_for_fleet(k8s.CoreV1Api(api), launch, record)
        procs.apply_objects(k8s.CustomObjectsApi(api), objects)
        yield Running(objects.package_names[0], record.metrics["worker"], record.metrics["bridge"])
    finally:
        procs.stop_processes(record)
        procs.delete_objects(api, record)
        api.close()


def test_documented_series_are_served_after_the_rollout(
    running: Running, kube_api_client: k8s.ApiClient
) -> None:
    custom = k8s.CustomObjectsApi(kube_api_client)

    def ready() -> bool:
        obj = custom.get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, running.package)
        conditions = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
        assert conditions.get("Ready") == "True", obj.get("status")
        return True

    assert_eventually(ready, timeout=ROLLOUT_TIMEOUT, interval=1.0)
    pkg = f'package="{running.package}"'

    def bridge_published() -> dict[str, list[tuple[str, float]]]:
        series = scrape(running.bridge_url)
        phases = {labels: value for labels, value in series.get("noderoll_rollout_phase", []) if pkg in labels}
        assert any('phase="Complete"' in k and v == 1 for k, v in phases.items()), phases
        nodes = [(k, v) for k, v in series.get("noderoll_package_nodes", []) if pkg in k and 'state="complete"' in k]
        assert sum(v for _, v in nodes) == NODES, nodes
        return series

    bridge = assert_eventually(bridge_published, timeout=60)
    assert any(pkg in k for k, _ in bridge.get("noderoll_rollout_batch_number", []))
    assert "noderoll_budget_limit" in bridge and "noderoll_budget_leases_in_use" in bridge

    worker = scrape(running.worker_url)
    stage_counts = [(k, v) for k, v in worker.get("noderoll_stage_duration_seconds", [])
                    if k.startswith("_count") and pkg in k]
    assert stage_counts and sum(v for _, v in stage_counts) >= NODES, stage_counts
    interrupts = dict(worker.get("noderoll_interrupts_total", []))
    assert interrupts.get('{outcome="succeeded",type="service"}', 0) >= NODES, interrupts
    drains = [v for k, v in worker.get("noderoll_drain_duration_seconds", []) if k.startswith("_count")]
    assert sum(drains) >= NODES, drains
    # Every series either process serves is a documented one.
    assert set(worker) | set(bridge) <= set(metrics.metric_names())
