"""The window's next pod created by the activity before it (ADR 0022), with the real activities
against the real kube-apiserver and a simulated kubelet: the drain creates the first stage pod, a
stage pod whose every stage succeeded the interrupt's, the interrupt (once the node is back) the first
post-interrupt pod; the activity that runs the pod adopts it and creates nothing; a stage that failed
creates nothing ahead (no reboot after a failed stage); a next pod that cannot be created fails
nothing and is left to its own activity."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

import kube
from activities.drain import drain_node
from activities.interrupts import run_interrupt
from activities.nodes import read_node
from activities.pod_create import pod_name
from activities.stage_run import run_stage_pod
from api.keys import PACKAGE_POD_NAMESPACE
from fleetsim.faults import Fault
from localstack.state import StackInfo
from protocol.node_activities import (
    DrainNodeInput,
    NextPod,
    NodeInput,
    RunInterruptInput,
    RunStagePodInput,
    StageJob,
)
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SCRIPT_IMAGE, SYSCTL_IMAGE

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def stage_job(node: str, window: str, mode: str = "apply", **fields: Any) -> StageJob:
    modes = [mode, f"{mode}-check"]
    return StageJob(package="sysctl-tuning", version="1.0.0", node=node, mode=mode, modes=modes,
                    image=SYSCTL_IMAGE, window=window, tolerations=[{"operator": "Exists"}],
                    timeout_seconds=60, **fields)


def reboot_job(node: str, window: str) -> StageJob:
    return StageJob(package="script-config", version="1.0.0", node=node, mode="interrupt", image=SCRIPT_IMAGE,
                    window=window, tolerations=[{"operator": "Exists"}],
                    interrupt={"type": "reboot", "services": []}, timeout_seconds=60)


def pod_posts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pods the activities POST from now on (the kubernetes client's requests)."""
    api = kube.api_client()
    real = api.call_api
    posted: list[str] = []

    def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "POST" and urlsplit(url).path.endswith("/pods"):
            # (method, url, header_params, body, ...): the body as the client serialised it.
            body = kwargs.get("body", args[1] if len(args) > 1 else None)
            manifest = json.loads(body) if isinstance(body, (str, bytes)) else (body or {})
            posted.append(str((manifest.get("metadata") or {}).get("name", "")))
        return real(method, url, *args, **kwargs)

    monkeypatch.setattr(api, "call_api", counted)
    return posted


def read_pod(core: client.CoreV1Api, name: str) -> client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, PACKAGE_POD_NAMESPACE)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_the_drain_creates_the_first_stage_pod_and_its_activity_adopts_it(
        node: str, kube_api_client: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    core = client.CoreV1Api(kube_api_client)
    job = stage_job(node, unique_name("w"))
    drained = ActivityEnvironment().run(drain_node, DrainNodeInput(node, timeout_seconds=30, then=NextPod(job)))
    ahead = drained.next_pod
    assert ahead is not None and ahead.name == pod_name(job) and ahead.uid and ahead.resource_version
    pod = read_pod(core, ahead.name)
    assert pod is not None and pod.metadata.uid == ahead.uid
    posted = pod_posts(monkeypatch)
    result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(job, prestarted=ahead))
    assert (result.exit_code, result.job_name, result.adopted) == (0, ahead.name, False)
    assert result.completed == ["apply", "apply-check"]
    assert posted == [], "the stage pod's activity created a pod again"
    assert read_pod(core, ahead.name).metadata.uid == ahead.uid  # type: ignore[union-attr]


def test_a_prestarted_pod_of_another_name_is_not_taken(node: str, kube_api_client: ApiClient) -> None:
    """A pod handed over is taken only when it is the very pod asked for (its name says so)."""
    core = client.CoreV1Api(kube_api_client)
    window = unique_name("w")
    drained = ActivityEnvironment().run(
        drain_node, DrainNodeInput(node, timeout_seconds=30, then=NextPod(stage_job(node, window))))
    assert drained.next_pod is not None
    # The same Package's stages must not run twice at once on one node: let the pod created ahead end.
    assert_eventually(lambda: (read_pod(core, drained.next_pod.name).status.phase  # type: ignore[union-attr]
                               in ("Succeeded", "Failed")), timeout=60)
    other = stage_job(node, window, attempt=2)
    result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(other, prestarted=drained.next_pod))
    assert result.exit_code == 0 and result.job_name == pod_name(other) != drained.next_pod.name  # type: ignore[union-attr]


def test_a_failed_stage_creates_nothing_ahead_and_so_never_reboots(
        local_stack: StackInfo, kube_api_client: ApiClient) -> None:
    kube.configure(local_stack.kubeconfig)
    core = client.CoreV1Api(kube_api_client)
    with running_fleet(local_stack, nodes=1) as fleet:
        node = fleet.node_names[0]
        boot = ActivityEnvironment().run(read_node, NodeInput(node)).boot_id
        fleet.options.faults.add(Fault("fail-stage", nodes=node, mode="apply-check", exit_code=4))
        window = unique_name("w")
        interrupt = reboot_job(node, window)
        result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(stage_job(node, window),
                                                                           then=NextPod(interrupt)))
        assert (result.exit_code, result.mode, result.next_pod) == (4, "apply-check", None)
        assert read_pod(core, pod_name(interrupt)) is None, "the interrupt pod was created after a failed stage"
        assert ActivityEnvironment().run(read_node, NodeInput(node)).boot_id == boot


def test_the_stage_pod_creates_the_interrupt_and_the_interrupt_the_post_interrupt_pod(
        node: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One reboot for the whole chain: the interrupt's activity adopts the pod the stage pod created
    (the node may be rebooting already) and, once the node is back, creates the first post-interrupt pod."""
    boot = ActivityEnvironment().run(read_node, NodeInput(node)).boot_id
    window = unique_name("w")
    interrupt, post = reboot_job(node, window), stage_job(node, window, mode="post-interrupt")
    staged = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(stage_job(node, window),
                                                                       then=NextPod(interrupt)))
    assert staged.exit_code == 0 and staged.next_pod is not None and staged.next_pod.name == pod_name(interrupt)
    posted = pod_posts(monkeypatch)
    rebooted = ActivityEnvironment().run(run_interrupt, RunInterruptInput(
        interrupt, boot, reboot_timeout_seconds=30, prestarted=staged.next_pod, then=NextPod(post)))
    assert rebooted.exit_code == 0 and rebooted.boot_id_after not in ("", boot)
    assert rebooted.job_name == pod_name(interrupt)
    # Nothing but the post-interrupt pod was created: the interrupt pod was not made a second time.
    assert posted == [pod_name(post)]
    ahead = rebooted.next_pod
    assert ahead is not None and ahead.name == pod_name(post)
    result = ActivityEnvironment().run(run_stage_pod, RunStagePodInput(post, prestarted=ahead))
    assert result.exit_code == 0 and result.completed == ["post-interrupt", "post-interrupt-check"]
    assert posted == [pod_name(post)]
    assert ActivityEnvironment().run(read_node, NodeInput(node)).boot_id == rebooted.boot_id_after


def test_a_next_pod_that_cannot_be_created_fails_nothing(node: str, kube_api_client: ApiClient) -> None:
    """The apiserver refuses the next pod (an invalid toleration): the drain still succeeds, and the
    pod is left to its own activity (which reports the refusal as its failure)."""
    bad = stage_job(node, unique_name("w"))
    bad.tolerations = [{"operator": "Sometimes"}]
    drained = ActivityEnvironment().run(drain_node, DrainNodeInput(node, timeout_seconds=30, then=NextPod(bad)))
    assert drained.next_pod is None
    assert read_pod(client.CoreV1Api(kube_api_client), pod_name(bad)) is None
