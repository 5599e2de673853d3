"""Deletion protection on the real stack (issue 16 item 2): the finalizer `noderoll.io/in-use`.

* A DeploymentPolicy that a Package names stays (condition InUse, reason DeletionBlocked, naming the
  Package; a Warning Event) until the Package is gone.
* A Package another one depends on stays, and stays in its fleet, while the dependent exists.
* `kubectl delete -f dir/` of the whole example set (installed on two nodes, one of them with an
  uninstall) completes: dependents go first, then their dependencies, then the policies.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from api import keys
from localstack.state import StackInfo
from tests.helpers import assert_eventually, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import package_spec
from tests.helpers.processes import TEST_LABEL, NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    condition,
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    read_package,
)

pytestmark = pytest.mark.integration
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "examples").glob("*.yaml"))
TIMEOUT = 300.0


run = noderoll_fixture(retry_backoff_seconds=1)


def read(api: ApiClient, plural: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(api).get_cluster_custom_object(
            keys.GROUP, keys.VERSION, plural, name)
        return obj
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def delete(api: ApiClient, plural: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_cluster_custom_object(keys.GROUP, keys.VERSION, plural, name)


def has_in_use(api: ApiClient, plural: str, name: str) -> bool:
    obj = read(api, plural, name)
    assert obj is not None and keys.IN_USE_FINALIZER in (obj["metadata"].get("finalizers") or []), obj
    return True


def blocked_by(api: ApiClient, plural: str, name: str, user: str) -> bool:
    obj = read(api, plural, name)
    assert obj is not None and obj["metadata"].get("deletionTimestamp"), obj
    cond = condition(obj, "InUse")
    assert (cond["status"], cond["reason"]) == ("True", "DeletionBlocked") and user in cond["message"], cond
    return True


def gone(api: ApiClient, plural: str, name: str) -> bool:
    assert read(api, plural, name) is None, f"{plural}/{name} still there"
    return True


def warning_events(api: ApiClient, kind: str, name: str) -> list[str]:
    selector = f"involvedObject.name={name},involvedObject.kind={kind},reason=DeletionBlocked"
    return [e.message for e in client.CoreV1Api(api).list_namespaced_event("default", field_selector=selector).items]


def spec(policy: str | None, **extra: Any) -> dict[str, Any]:
    """A sysctl-tuning Package spec that selects no node."""
    return package_spec(policy=policy, labels={"protect-test": unique_name("none")}, **extra)


def test_a_policy_in_use_is_kept_until_its_packages_go(run: NoderollProcesses, kube_api_client: ApiClient) -> None:
    policy, name = unique_name("pol"), unique_name("user")
    try:
        create_policy(kube_api_client, run, policy, {"default": {"budget": {"count": 1}}})
        create_package(kube_api_client, run.package(name, spec(policy)))
        assert_eventually(lambda: has_in_use(kube_api_client, keys.POLICY_PLURAL, policy), timeout=60)
        delete(kube_api_client, keys.POLICY_PLURAL, policy)
        assert_eventually(lambda: blocked_by(kube_api_client, keys.POLICY_PLURAL, policy, name), timeout=60)
        assert_eventually(lambda: warning_events(kube_api_client, keys.POLICY_KIND, policy), timeout=30)
        # Its Package still rolls out with it (Ready, not Invalid).
        assert_eventually(lambda: condition(read_package(kube_api_client, name), "Ready")["status"] == "True",
                          timeout=TIMEOUT)
        delete(kube_api_client, keys.PACKAGE_PLURAL, name)
        assert_eventually(lambda: gone(kube_api_client, keys.PACKAGE_PLURAL, name), timeout=60)
        assert_eventually(lambda: gone(kube_api_client, keys.POLICY_PLURAL, policy), timeout=60)
    finally:
        delete_package(kube_api_client, name)
        delete_policy(kube_api_client, policy)


def test_a_dependency_is_kept_while_a_dependent_exists(run: NoderollProcesses, kube_api_client: ApiClient) -> None:
    base, app = unique_name("base"), unique_name("app")
    try:
        create_package(kube_api_client, run.package(base, spec(None)))
        create_package(kube_api_client, run.package(app, spec(None, dependsOn={base: "1.0.0"})))
        assert_eventually(lambda: has_in_use(kube_api_client, keys.PACKAGE_PLURAL, base), timeout=60)
        in_use = condition(read_package(kube_api_client, base), "InUse")
        assert (in_use["status"], in_use["reason"]) == ("True", "InUse") and app in in_use["message"], in_use
        delete(kube_api_client, keys.PACKAGE_PLURAL, base)
        assert_eventually(lambda: blocked_by(kube_api_client, keys.PACKAGE_PLURAL, base, app), timeout=60)
        assert_eventually(lambda: warning_events(kube_api_client, keys.PACKAGE_KIND, base), timeout=30)
        # The dependent does not lose its dependency: it stays Ready.
        assert_eventually(lambda: condition(read_package(kube_api_client, app), "Ready")["status"] == "True",
                          timeout=TIMEOUT)
        delete(kube_api_client, keys.PACKAGE_PLURAL, app)
        assert_eventually(lambda: gone(kube_api_client, keys.PACKAGE_PLURAL, app), timeout=60)
        assert_eventually(lambda: gone(kube_api_client, keys.PACKAGE_PLURAL, base), timeout=60)
    finally:
        for name in (app, base):
            delete_package(kube_api_client, name)


def example_set(run: NoderollProcesses, suffix: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The examples renamed with `suffix`, labelled for this run's bridge, their selectors on our nodes."""
    docs = [d for path in EXAMPLES for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        doc["metadata"]["name"] += suffix
        doc["metadata"].setdefault("labels", {})[TEST_LABEL] = run.run_id
        spec = doc["spec"]
        if doc["kind"] == keys.PACKAGE_KIND:
            spec["dependsOn"] = {dep + suffix: v for dep, v in (spec.get("dependsOn") or {}).items()}
            if spec.get("deploymentPolicy"):
                spec["deploymentPolicy"] += suffix
            spec["nodeSelector"] = {"matchLabels": labels}
    return docs


def kubectl(stack: StackInfo, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(stack.kubeconfig), *argv], capture_output=True,
                          text=True, timeout=timeout)


def test_deleting_the_whole_example_set_completes(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, tmp_path: Path
) -> None:
    labels = {"protect-test": unique_name("prune")}
    suffix = "-" + unique_name("x")[-6:]
    docs = example_set(run, suffix, labels)
    for index, doc in enumerate(docs):
        (tmp_path / f"{index:02d}.yaml").write_text(yaml.safe_dump(doc))
    packages = [d["metadata"]["name"] for d in docs if d["kind"] == keys.PACKAGE_KIND]
    policies = [d["metadata"]["name"] for d in docs if d["kind"] == keys.POLICY_KIND]
    kmod = f"kmod-blocklist{suffix}"
    # CPU nodes (no nvidia.com/gpu): policy gpu-fleet keeps 80 % of the GPUs schedulable, which on two
    # 8-GPU nodes would keep both out of a window for good (the floor waits, it is never broken).
    with running_fleet(local_stack, nodes=2, labels=labels, gpus=[0]):
        try:
            applied = kubectl(local_stack, "apply", "-f", f"{tmp_path}/")
            assert applied.returncode == 0, applied.stderr
            ready = kubectl(local_stack, "wait", "--for=condition=Ready", f"package/{kmod}", f"package/sysctl-tuning{suffix}",
                            f"--timeout={int(TIMEOUT)}s", timeout=TIMEOUT + 30)
            assert ready.returncode == 0, ready.stderr
            # A GitOps prune: everything at once; kubectl waits until every object is gone.
            pruned = kubectl(local_stack, "delete", "-f", f"{tmp_path}/", f"--timeout={int(TIMEOUT)}s",
                             timeout=TIMEOUT + 30)
            assert pruned.returncode == 0, (pruned.stdout, pruned.stderr)
            for name in packages:
                gone(kube_api_client, keys.PACKAGE_PLURAL, name)
            for name in policies:
                gone(kube_api_client, keys.POLICY_PLURAL, name)
            # kmod-blocklist (uninstall enabled) was uninstalled from the nodes before it went.
            for node in client.CoreV1Api(kube_api_client).list_node(
                    label_selector=",".join(f"{k}={v}" for k, v in labels.items())).items:
                state = (node.metadata.annotations or {}).get(keys.NODE_STATE_ANNOTATION) or "{}"
                assert kmod not in state, (node.metadata.name, state)
        finally:
            for name in packages:
                delete_package(kube_api_client, name)
            for name in policies:
                if read(kube_api_client, keys.POLICY_PLURAL, name) is not None:
                    client.CustomObjectsApi(kube_api_client).patch_cluster_custom_object(
                        keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, name, {"metadata": {"finalizers": None}})
                delete_policy(kube_api_client, name)
