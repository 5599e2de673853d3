"""api.stage_containers: container names of a stage pod of one or several Packages, and back."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from api.keys import STAGE_PACKAGE_LABEL, STAGE_PACKAGES_ANNOTATION
from api.stage_containers import container_name, copy_container_name, is_copy, pod_packages, split_container

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MODES = ["uninstall", "uninstall-check", "upgrade", "upgrade-check", "apply", "apply-check", "config",
         "config-check", "interrupt", "post-interrupt", "post-interrupt-check"]
PACKAGE = st.from_regex(r"[a-z]([-a-z0-9]{0,41}[a-z0-9])?", fullmatch=True)


def test_one_package_keeps_nodewrights_names_several_are_prefixed_by_index() -> None:
    assert (container_name(0, 1, "apply-check"), copy_container_name(0, 1)) == ("apply-check", "package")
    assert (container_name(1, 2, "apply-check"), copy_container_name(1, 2)) == ("p1-apply-check", "p1-package")


@given(st.lists(PACKAGE, min_size=1, max_size=12, unique=True), st.sampled_from(MODES))
def test_every_name_is_a_dns_label_that_maps_back_to_its_package_and_mode(packages: list[str], mode: str) -> None:
    for index, package in enumerate(packages):
        name = container_name(index, len(packages), mode)
        assert DNS_LABEL.match(name) and len(name) <= 63
        assert split_container(name, packages) == (package, mode)
        assert not is_copy(name)
        assert is_copy(copy_container_name(index, len(packages)))


def test_a_pods_packages_come_from_its_annotation_else_its_label() -> None:
    labels = {STAGE_PACKAGE_LABEL: "a"}
    assert pod_packages(labels, {STAGE_PACKAGES_ANNOTATION: json.dumps(["a", "b"])}) == ["a", "b"]
    assert pod_packages(labels, {}) == ["a"] and pod_packages(labels, {STAGE_PACKAGES_ANNOTATION: "{bad"}) == ["a"]
    assert pod_packages({}, None) == []
    assert split_container("p7-apply", ["a", "b"]) == ("", "apply")  # out of range: no Package
    assert split_container("apply", ["a", "b"]) == ("", "apply")


def test_noderoll_logs_finds_each_packages_modes_in_a_pod_of_several() -> None:
    from kubernetes import client as k8s

    from cli.ops_client import mode_container, pod_modes

    def container(name: str) -> k8s.V1Container:
        return k8s.V1Container(name=name)

    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(labels={STAGE_PACKAGE_LABEL: "a"},
                                  annotations={STAGE_PACKAGES_ANNOTATION: json.dumps(["a", "b"])}),
        spec=k8s.V1PodSpec(containers=[container("p1-apply-check")], init_containers=[
            container("p0-package"), container("p0-apply"), container("p1-package"), container("p1-apply")]))
    assert pod_modes(pod, "b") == ["apply", "apply-check"] and pod_modes(pod, "a") == ["apply"]
    assert mode_container(pod, "b", "apply-check") == "p1-apply-check"
    single = k8s.V1Pod(metadata=k8s.V1ObjectMeta(labels={STAGE_PACKAGE_LABEL: "a"}),
                       spec=k8s.V1PodSpec(containers=[container("apply-check")],
                                          init_containers=[container("package"), container("apply")]))
    assert pod_modes(single, "a") == ["apply", "apply-check"] and mode_container(single, "a", "apply") == "apply"
