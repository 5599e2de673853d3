"""Bad input at the door (A01-A10 in docs/reliability.md; issue #16 item 1, A08-A10 issue 44): the admission webhook of
the suite's private stack (`dev up` registers it) refuses what can never roll, with the message, and
stores nothing; a reference to an object that does not exist yet is admitted and reported by the
bridge, and the rollout completes once the object is applied."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml
from kubernetes import client

from api.keys import API_VERSION, GROUP, PACKAGE_KIND, PACKAGE_PLURAL, POLICY_KIND, POLICY_PLURAL, VERSION
from tests.badinput.support import System
from tests.helpers import unique_name
from tests.helpers.packages import SLEEP_IMAGE, package_object, package_spec

pytestmark = pytest.mark.timeout(600)


def package(name: str, **spec: Any) -> dict[str, Any]:
    return package_object(name, package_spec(SLEEP_IMAGE, **spec))


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": {"name": name},
            "spec": {"default": {"budget": {"count": 1}}, **spec}}


def kubectl_create(system: System, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    # `create`, not client-side `apply`: apply copies the object into an annotation, which the apiserver
    # refuses above 256 KiB before any admission (A01's 1.1 MB config); server-side apply does not.
    return subprocess.run(["kubectl", "--kubeconfig", system.kubeconfig, "create", "-f", "-"],
                          input=yaml.safe_dump_all(docs), capture_output=True, text=True, timeout=120)


def stored(system: System, plural: str, name: str) -> bool:
    try:
        system.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
    except client.exceptions.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def refused_cases() -> list[Any]:
    a, b, c = (unique_name(x) for x in "abc")
    base = unique_name("base")
    long_name = ("gpu-driver-550-for-the-h100-training-fleet-in-zone-a-" + unique_name("x")[-4:])
    return [
        pytest.param([package(unique_name("big"), config={"big.conf": "x" * 1_100_000})],
                     "spec.config: totals 1100000 bytes (1.0 MiB), more than the 1048576 bytes (1 MiB) a ConfigMap "
                     "can hold", id="A01-config-over-1-MiB"),
        pytest.param([package(a, dependsOn={b: "1.0.0"}), package(b, dependsOn={c: "1.0.0"}),
                      package(c, dependsOn={a: "1.0.0"})],
                     "spec.dependsOn: dependency cycle", id="A02-dependency-cycle-closed"),
        pytest.param([policy(unique_name("dup"), compartments=[
            {"name": "gpu", "selector": {"matchLabels": {"pool": "a"}}, "budget": {"count": 1}},
            {"name": "gpu", "selector": {"matchLabels": {"pool": "b"}}, "budget": {"count": 1}}])],
                     "spec: compartments[1].name 'gpu' is used twice; names must be unique",
                     id="A03-duplicate-compartments"),
        pytest.param([package(long_name)], f"metadata.name '{long_name}' has 57 characters",
                     id="A04-57-character-name"),
        pytest.param([package(unique_name("svc"), interrupt={"type": "service"})],
                     "spec.interrupt: type service needs a non-empty services list", id="A05-service-without-services"),
        pytest.param([package(base), package(unique_name("app"), dependsOn={base: "2.0.0"})],
                     f"needs {base} 2.0.0, but Package {base} has version 1.0.0; depend on 1.0.0",
                     id="A06-dependency-at-another-version"),
        pytest.param([policy(unique_name("wait"), workloads={"rules": [{"gpuPods": True, "action": "WaitForCompletion"}]})],
                     "spec.workloads.rules[0]: action WaitForCompletion needs timeoutSeconds",
                     id="A08-wait-for-completion-without-timeout"),
        pytest.param([policy(unique_name("verify"), verify={"image": "registry.example/gpu verify:1.0.0"})],
                     "spec.verify.image: 'registry.example/gpu verify:1.0.0' is not an image reference",
                     id="A09-verify-image-with-a-space"),
        pytest.param([policy(unique_name("respect"), respect={"taints": ["noderoll.io/upcoming"]})],
                     "spec.respect.taints: taints[0]: 'noderoll.io/upcoming' is one of noderoll's own taints",
                     id="A10-respect-noderolls-own-taint"),
    ]


@pytest.mark.parametrize(("docs", "message"), refused_cases())
def test_refused_at_apply_with_the_message_and_nothing_stored(
    system: System, docs: list[dict[str, Any]], message: str,
) -> None:
    result = kubectl_create(system, docs)
    assert result.returncode == 1, result.stdout
    assert message in result.stderr, result.stderr
    last = docs[-1]
    plural = PACKAGE_PLURAL if last["kind"] == PACKAGE_KIND else POLICY_PLURAL
    assert not stored(system, plural, last["metadata"]["name"])
    assert system.stage_pods(last["metadata"]["name"]) == []
    for doc in docs[:-1]:
        system.delete(PACKAGE_PLURAL, doc["metadata"]["name"])


def test_a07_dependent_and_package_before_their_dependency_and_policy(system: System) -> None:
    """The dependent first, its dependency and its DeploymentPolicy later: admitted, reported, then rolled."""
    with system.fleet(1) as fleet:
        dependency, late_policy = unique_name("dep"), unique_name("late-policy")
        dependent = system.package(fleet, dependsOn={dependency: "1.0.0"}, deploymentPolicy=late_policy)
        status = system.wait_status(dependent, lambda s: s.get("phase") == "Invalid")
        assert f"no Package '{dependency}'" in status.get("message", "") + str(status.get("conditions"))
        system.package(fleet, name=dependency)
        system.custom.create_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL, policy(late_policy))
        system.wait_complete(dependency, 1)
        system.wait_complete(dependent, 1)
