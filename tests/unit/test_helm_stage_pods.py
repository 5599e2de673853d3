"""The chart's `stagePods` values reach the worker as the settings its stage pods get (activities.stage_pod)."""

from __future__ import annotations

from typing import Any

import pytest

from activities.stage_pod import StagePodSettings, settings_from_env
from tests.helpers.helm import CHART, INSTALL_HINT, Render, find_binary, render

HELM = find_binary("helm")
pytestmark = pytest.mark.skipif(HELM is None, reason=f"helm is not installed: {INSTALL_HINT}")


def worker_settings(sets: dict[str, str]) -> StagePodSettings:
    assert HELM is not None
    objects = render(HELM, Render(sets=sets))
    worker = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-worker"))
    env: list[dict[str, Any]] = worker["spec"]["template"]["spec"]["containers"][0]["env"]
    return settings_from_env({e["name"]: e["value"] for e in env if "value" in e})


def test_defaults_pin_the_agent_image_of_the_chart_version() -> None:
    chart_version = next(line.split('"')[1] for line in (
        CHART / "Chart.yaml").read_text().splitlines() if line.startswith("appVersion"))
    assert worker_settings({}) == StagePodSettings(agent_image=f"ghcr.io/noderoll/agent:{chart_version}")


def test_every_stage_pod_value_reaches_the_worker() -> None:
    settings = worker_settings({
        "stagePods.agentImage.repository": "mirror.local/noderoll-agent",
        "stagePods.agentImage.digest": "sha256:" + "a" * 64,
        "stagePods.imagePullSecrets[0].name": "corp-registry",
        "stagePods.imagePullSecrets[1].name": "nvcr",
        "stagePods.hostNetwork": "true",
        "stagePods.priorityClassName": "system-node-critical",
    })
    assert settings == StagePodSettings(agent_image="mirror.local/noderoll-agent@sha256:" + "a" * 64,
                                        image_pull_secrets=("corp-registry", "nvcr"), host_network=True,
                                        priority_class_name="system-node-critical")


def test_the_bridge_gets_none_of_them() -> None:
    assert HELM is not None
    bridge = next(o for o in render(HELM, Render()) if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-bridge"))
    names = {e["name"] for e in bridge["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not names & {"NODEROLL_AGENT_IMAGE", "NODEROLL_STAGE_HOST_NETWORK"}


def test_worker_and_bridge_may_use_the_host_network() -> None:
    assert HELM is not None
    objects = render(HELM, Render(sets={"worker.hostNetwork": "true"}))
    specs = {o["metadata"]["name"].rsplit("-", 1)[-1]: o["spec"]["template"]["spec"]
             for o in objects if o["kind"] == "Deployment"}
    assert (specs["worker"].get("hostNetwork"), specs["worker"].get("dnsPolicy")) == (True, "ClusterFirstWithHostNet")
    assert "hostNetwork" not in specs["bridge"]
