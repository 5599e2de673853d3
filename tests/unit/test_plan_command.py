"""`noderoll plan`'s own parts (cli/plan_command.py): files merged over the cluster, fleets as the bridge
assembles them, the table and the JSON."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from cli.plan_command import PlanError, desired_fleets, plan_json, read_manifests, render_plan
from planning.rollout_plan import PlanInput, plan_fleet
from tests.unit.fleet_builders import a_node, a_spec, taint

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
    merged = cluster | read_manifests([str(first), str(second)])
    fleets = desired_fleets(merged, None)
    assert list(fleets) == ["gpu"] and fleets["gpu"].packages[0].spec["version"] == "3.0.0"
    assert fleets["gpu"].policy is not None and fleets["gpu"].policy["canary"]["count"] == 1


def test_an_invalid_object_of_another_fleet_does_not_stop_this_ones_plan() -> None:
    broken = a_package_object("broken", policy="other")
    broken["spec"]["version"] = "not a version!"
    objects = {("Package", "kernel"): a_package_object("kernel"), ("Package", "broken"): broken,
               ("DeploymentPolicy", "gpu"): a_policy_object()}
    assert list(desired_fleets(objects, "gpu")) == ["gpu"]
    with pytest.raises(PlanError, match="Package broken is invalid"):
        desired_fleets(objects, None)


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
