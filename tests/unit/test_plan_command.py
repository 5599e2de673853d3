"""`noderoll plan`'s own parts (cli/plan_command.py): files merged over the cluster (Lists expanded, bad
kinds refused), fleets as the bridge assembles them, a `--fleet` naming no fleet, the cluster's order
key, the table and the JSON."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from rich.console import Console

from api import keys
from cli.plan_command import (
    PlanError,
    desired_fleets,
    held_by_node_maintenance,
    known_fleets,
    plan_json,
    read_manifests,
    render_plan,
    unknown_fleet,
)
from kube.node_snapshot import NodeFacts, node_view
from planning.rollout.compartments import stable_order
from planning.views.rollout_plan import PlanInput, plan_fleet
from protocol.names import fleet_workflow_id
from tests.unit.fleet_builders import a_node, a_spec, recorded, taint

NOW = "2025-01-01T00:00:00+00:00"


def a_package_object(name: str, policy: str | None = "gpu", **fields: Any) -> dict[str, Any]:
    spec = a_spec(name, **fields)
    if policy:
        spec["deploymentPolicy"] = policy
    return {"apiVersion": "noderoll.io/v1alpha1", "kind": "Package", "metadata": {"name": name, "generation": 1},
            "spec": spec}


def a_policy_object(name: str = "gpu") -> dict[str, Any]:
    return {"apiVersion": "noderoll.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": name},
            "spec": {"canary": {"count": 1}, "default": {"budget": {"count": 2}}}}


def test_files_replace_the_clusters_objects_by_kind_and_name(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump_all([a_package_object("kernel", version="2.0.0"), {"kind": "ConfigMap"}]))
    second.write_text(yaml.safe_dump(a_package_object("kernel", version="3.0.0")))
    cluster = {("Package", "kernel"): a_package_object("kernel"), ("DeploymentPolicy", "gpu"): a_policy_object()}
    files = read_manifests([str(first), str(second)])
    fleets = desired_fleets(cluster | files.objects, None)
    assert list(fleets) == ["gpu"] and fleets["gpu"].packages[0].spec["version"] == "3.0.0"
    assert fleets["gpu"].policy is not None and fleets["gpu"].policy["canary"]["count"] == 1
    # The ConfigMap (no apiVersion, not a noderoll kind) is left out with a note.
    assert len(files.skipped) == 1 and re.fullmatch(
        rf"{re.escape(str(first))}:\d+: skipped ConfigMap/<unnamed> \(apiVersion missing: not noderoll.io\)",
        files.skipped[0]), files.skipped


def test_a_kubectl_list_in_a_file_is_planned_like_its_items(tmp_path: Path) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        a_package_object("kernel", version="2.0.0"), a_policy_object()]}))
    files = read_manifests([str(listed)])
    assert sorted(files.objects) == [("DeploymentPolicy", "gpu"), ("Package", "kernel")]
    assert desired_fleets(files.objects, None)["gpu"].packages[0].spec["version"] == "2.0.0"


def test_every_unreadable_document_of_every_file_is_named_and_nothing_is_planned(tmp_path: Path) -> None:
    typo, broken, good = tmp_path / "typo.yaml", tmp_path / "broken.yaml", tmp_path / "good.yaml"
    typo.write_text(yaml.safe_dump_all([a_package_object("kernel"), {**a_package_object("driver"), "kind": "Pakage"}]))
    broken.write_text("kind: Package\nmetadata: {name: [unclosed\n")
    good.write_text(yaml.safe_dump(a_policy_object()))
    with pytest.raises(PlanError) as raised:
        read_manifests([str(typo), str(broken), str(good), str(tmp_path / "missing.yaml")])
    message = str(raised.value)
    assert message.startswith("3 problem(s) in the files; nothing was planned")
    assert f"{typo}:" in message and "kind 'Pakage' is not a noderoll kind (did you mean Package?)" in message
    assert f"{broken}:" in message and "YAML syntax error" in message
    assert f"{tmp_path / 'missing.yaml'}: cannot read" in message and str(good) not in message


def test_a_fleet_that_does_not_exist_names_the_fleets_that_do() -> None:
    objects = {("Package", "kernel"): a_package_object("kernel", policy="gpu"),
               ("Package", "orphan"): a_package_object("orphan", policy="named-only"),
               ("DeploymentPolicy", "gpu"): a_policy_object(), ("DeploymentPolicy", "cpu"): a_policy_object("cpu")}
    objects[("DeploymentPolicy", "gpu-fleet")] = a_policy_object("gpu-fleet")
    known = known_fleets(objects, ["running-one"])
    assert known == {"gpu", "gpu-fleet", "cpu", "named-only", "default", "running-one"}
    error = unknown_fleet("gpu-flet", known, files=True)
    assert str(error) == ("--fleet gpu-flet: no such fleet (no DeploymentPolicy gpu-flet in the cluster or the files, "
                          "and no fleet of that name runs). The fleets are: cpu, default, gpu, gpu-fleet, named-only, "
                          "running-one; did you mean gpu-fleet?")
    assert "did you mean" not in str(unknown_fleet("zzz", {"default"}, files=False))


def test_an_invalid_object_of_another_fleet_does_not_stop_this_ones_plan() -> None:
    broken = a_package_object("broken", policy="other")
    broken["spec"]["version"] = "not a version!"
    objects = {("Package", "kernel"): a_package_object("kernel"), ("Package", "broken"): broken,
               ("DeploymentPolicy", "gpu"): a_policy_object()}
    assert list(desired_fleets(objects, "gpu")) == ["gpu"]
    with pytest.raises(PlanError, match="Package broken is invalid"):
        desired_fleets(objects, None)


def test_a_package_being_deleted_is_planned_as_its_uninstall() -> None:
    """As the bridge carries it: with `uninstall.enabled` its uninstall windows run on the nodes that have
    it; kept as it is while another Package depends on it; left out once its finalizer is gone."""
    deleting = {"deletionTimestamp": "2025-01-01T00:00:00Z", "finalizers": [keys.FINALIZER]}
    kernel = a_package_object("kernel", uninstall={"enabled": True})
    kernel["metadata"] |= deleting
    objects = {("Package", "kernel"): kernel, ("DeploymentPolicy", "gpu"): a_policy_object()}
    [entry] = desired_fleets(objects, None)["gpu"].packages
    assert entry.name == "kernel" and entry.uninstall
    nodes = [a_node("has", state=recorded(kernel="1.0.0")), a_node("never")]
    plan = plan_fleet(PlanInput(desired_fleets(objects, None)["gpu"], nodes, NOW))
    assert list(plan.windows) == ["has"] and [p.action for p in plan.windows["has"].packages] == ["uninstall"]
    # Another Package depends on it: it stays installed (not uninstalled under its user).
    user = a_package_object("driver", dependsOn={"kernel": "1.0.0"})
    held = desired_fleets(objects | {("Package", "driver"): user}, None)["gpu"]
    assert {e.name: e.uninstall for e in held.packages} == {"driver": False, "kernel": False}
    # Its finalizer gone: nothing left to do for it.
    kernel["metadata"]["finalizers"] = []
    assert desired_fleets(objects | {("Package", "driver"): a_package_object("driver")}, None)["gpu"].packages[0].name \
        == "driver"


def test_a_node_under_another_requestors_node_maintenance_is_planned_held() -> None:
    """The plan reads NodeMaintenance objects as the fleet's listing does: a policy that respects them
    (the default) does not plan a window on the node it holds; a 404 (no CRD) is no maintenance."""

    class Custom:
        def __init__(self, answer: dict[str, Any] | None) -> None:
            self.answer = answer

        def list_cluster_custom_object(self, *_args: Any) -> dict[str, Any]:
            if self.answer is None:
                raise ApiException(status=404)
            return self.answer

    maintenance = {"items": [{"metadata": {"namespace": "ops", "name": "nic"},
                              "spec": {"nodeName": "n1", "requestorID": "network.operator.com"}}]}
    ops = SimpleNamespace(custom=Custom(maintenance))
    held = held_by_node_maintenance(ops)  # type: ignore[arg-type]
    assert list(held) == ["n1"] and "ops/nic" in held["n1"]
    assert held_by_node_maintenance(SimpleNamespace(custom=Custom(None))) == {}  # type: ignore[arg-type]
    objects = {("Package", "kernel"): a_package_object("kernel"), ("DeploymentPolicy", "gpu"): a_policy_object()}
    facts = [NodeFacts(f"n{i}", labels={"pool": "gpu"}) for i in range(3)]
    nodes = [node_view(f, held.get(f.name, "")) for f in facts]
    plan = plan_fleet(PlanInput(desired_fleets(objects, None)["gpu"], nodes, NOW))
    assert sorted(plan.windows) == ["n0", "n2"], plan.windows


def test_a_policy_named_but_missing_is_an_error() -> None:
    with pytest.raises(PlanError, match="DeploymentPolicy gpu, which is neither in the cluster nor in the files"):
        desired_fleets({("Package", "kernel"): a_package_object("kernel")}, None)


def test_the_table_names_batches_canary_windows_skips_and_eta() -> None:
    objects = {("Package", "kernel"): a_package_object("kernel", interrupt={"type": "reboot"}),
               ("DeploymentPolicy", "gpu"): a_policy_object()}
    nodes = [a_node(f"n{i}") for i in range(3)] + [a_node("tainted", taints=[taint("broken")])]
    plan = plan_fleet(PlanInput(desired_fleets(objects, None)["gpu"], nodes, NOW))
    buffer = io.StringIO()
    Console(file=buffer, width=250, color_system=None).print(render_plan(plan))
    text = buffer.getvalue()
    assert "fleet/gpu wave 1: changes kernel" in text
    assert "3 window(s) on 4 node(s): 3 drain(s), 3 reboot(s)" in text
    assert f"canary: {plan.canary[0]}" in text and "batch 1 (canary): default 1:" in text
    assert "ETA " in text and "defaults" in text and "assumes every window succeeds" in text
    assert "kernel install 1.0.0: apply > config > interrupt > post-interrupt" in text
    assert "tainted" in text and "taints not tolerated: broken:NoSchedule" in text
    data = plan_json([plan])
    assert data["changes"] is True and data["fleets"][0]["totals"]["reboots"] == 3
    assert data["skipped_documents"] == []


def test_a_clusters_plan_orders_nodes_by_the_clusters_fleet_id() -> None:
    objects = {("Package", "kernel"): a_package_object("kernel"), ("DeploymentPolicy", "gpu"): a_policy_object()}
    desired = desired_fleets(objects, None)["gpu"]
    nodes = [a_node(f"n{i:02d}") for i in range(12)]
    orders = {}
    for cluster in ("", "east"):
        plan = plan_fleet(PlanInput(desired, nodes, NOW, cluster=cluster))
        expected = stable_order([n.name for n in nodes], fleet_workflow_id("gpu", cluster))
        assert sorted(plan.windows, key=lambda n: plan.windows[n].order) == expected
        assert plan.canary == expected[:1]
        orders[cluster] = expected
    assert orders[""] != orders["east"]  # the key differs, so would the rollout's order
    buffer = io.StringIO()
    Console(file=buffer, width=250, color_system=None).print(render_plan(plan, "east"))
    assert "fleet/east/gpu wave 1: changes kernel" in buffer.getvalue()
    assert "fleet/east/gpu: windows in batch order" in buffer.getvalue()
