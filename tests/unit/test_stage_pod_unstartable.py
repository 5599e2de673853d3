"""A stage pod whose image cannot be pulled fails its attempt at once (kube.pod_wait.unstartable)."""

from __future__ import annotations

import pytest
from kubernetes import client

from kube.pod_wait import unstartable


def _pod(reason: str, container: str = "apply") -> client.V1Pod:
    waiting = client.V1ContainerStateWaiting(reason=reason, message="no such image")
    status = client.V1ContainerStatus(name=container, image="x", image_id="", ready=False, restart_count=0,
                                      state=client.V1ContainerState(waiting=waiting))
    return client.V1Pod(status=client.V1PodStatus(phase="Pending", container_statuses=[status]))


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
def test_image_pull_failures_fail_the_attempt(reason: str) -> None:
    outcome = unstartable(_pod(reason))
    assert outcome is not None and outcome.exit_code == -1 and outcome.mode == "apply"
    assert reason in outcome.log_tail and "no such image" in outcome.log_tail


def test_an_init_container_that_cannot_start_fails_the_attempt() -> None:
    waiting = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="ErrImagePull"))
    init = client.V1ContainerStatus(name="apply", image="x", image_id="", ready=False, restart_count=0, state=waiting)
    check = client.V1ContainerStatus(name="apply-check", image="x", image_id="", ready=False, restart_count=0,
                                     state=client.V1ContainerState(waiting=client.V1ContainerStateWaiting(
                                         reason="PodInitializing")))
    pod = client.V1Pod(status=client.V1PodStatus(phase="Pending", init_container_statuses=[init],
                                                 container_statuses=[check]))
    outcome = unstartable(pod)
    assert outcome is not None and outcome.mode == "apply"


@pytest.mark.parametrize("pod", [
    pytest.param(_pod("ContainerCreating"), id="still-creating"),
    pytest.param(client.V1Pod(status=client.V1PodStatus(phase="Pending")), id="no-status-yet"),
])
def test_pods_that_may_still_start_are_waited_for(pod: client.V1Pod) -> None:
    assert unstartable(pod) is None
