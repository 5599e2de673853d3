"""The admission webhook on the real stack (`noderoll dev up` registers it): `kubectl apply` refused
with the message, the catalogue refused with exactly `noderoll validate`'s messages, the examples
admitted in any order, conflicts with stored Packages, metadata-only updates, both AdmissionReview
versions, and what the apiserver does while a webhook with our rules does not answer.

The catalogue's semantic documents are created for real under their catalogue names (an earlier
document must exist for a later one's check) and deleted afterwards; every other object gets a
unique name. No bridge runs here: the webhook alone decides.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api import keys
from localstack.cluster import WEBHOOK_NAME, webhook_configuration
from localstack.components import WEBHOOK
from localstack.state import StackInfo
from tests.catalogue import Entry, load
from tests.helpers import assert_eventually, unique_name
from tests.helpers.packages import example_image, package_object, package_spec

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
NODEROLL = str(Path(sys.executable).parent / "noderoll")
PLURALS = {keys.PACKAGE_KIND: keys.PACKAGE_PLURAL, keys.POLICY_KIND: keys.POLICY_PLURAL}
DENIED = f'admission webhook "{WEBHOOK_NAME}" denied the request: '
# The four documents the issue found accepted by `kubectl apply`, and the line kubectl prints.
ISSUE_CASES = {
    "m09-package-dependency-cycle": "spec.dependsOn: dependency cycle cat-m09-a -> cat-m09-b -> cat-m09-c -> cat-m09-a",
    "m17-policy-duplicate-compartments": "spec: compartments[1].name 'gpu' is used twice; names must be unique",
    "m03-package-service-without-services": "spec.interrupt: type service needs a non-empty services list",
}
# Documents `noderoll validate` refuses for a reference the webhook admits, and why.
ADMITTED = {
    ("m07-package-depends-on-missing", "cat-m07"): "its dependency may be applied a moment later",
    ("m16-package-unknown-policy", "cat-m16"): "its DeploymentPolicy may be applied a moment later",
    ("m09-package-dependency-cycle", "cat-m09-a"): "no cycle yet: cat-m09-c is not stored",
    ("m09-package-dependency-cycle", "cat-m09-b"): "no cycle yet: cat-m09-c is not stored",
    ("m24-package-duplicate-name", "cat-m24"): "the second document updates the first in a cluster",
    # The apiserver prunes fields its schema does not know while decoding the request, before any
    # admission: the webhook sees the object without the typo (only noderoll validate sees it).
    ("m10-package-typo-field", "cat-m10"): "the unknown field is pruned before admission",
}
SEMANTIC = [e for e in load() if e.level == "semantic"]


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def delete(api: client.ApiClient, kind: str, name: str) -> None:
    try:
        custom(api).delete_cluster_custom_object(keys.GROUP, keys.VERSION, PLURALS[kind], name)
    except ApiException as err:
        if err.status != 404:
            raise


def apply(api: client.ApiClient, doc: dict[str, Any]) -> str | None:
    """Create (or, as kubectl apply would, merge-patch an existing) object: None, or the refusal's message."""
    plural = PLURALS[doc["kind"]]
    try:
        try:
            custom(api).create_cluster_custom_object(keys.GROUP, keys.VERSION, plural, doc)
        except ApiException as err:
            if err.status != 409:
                raise
            custom(api).patch_cluster_custom_object(keys.GROUP, keys.VERSION, plural, doc["metadata"]["name"], doc)
    except ApiException as err:
        return str(json.loads(err.body)["message"])
    return None


def kubectl(stack: StackInfo, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(stack.kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def validate_lines(path: Path) -> dict[str, list[str]]:
    """`noderoll validate` on the file, as a user runs it: its problem lines by `Kind/name`, prefix cut."""
    result = subprocess.run([NODEROLL, "validate", "--quiet", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    lines: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        problem = re.sub(rf"^{re.escape(str(path))}:\d+: ", "", line)
        lines.setdefault(problem.split(":", 1)[0], []).append(problem)
    return lines


@pytest.fixture
def catalogue_cleanup(kube_api_client: client.ApiClient) -> Iterator[list[dict[str, Any]]]:
    docs: list[dict[str, Any]] = []
    yield docs
    for doc in reversed(docs):
        delete(kube_api_client, doc["kind"], doc["metadata"]["name"])


@pytest.mark.parametrize("entry", SEMANTIC, ids=lambda e: e.id)
def test_webhook_and_validate_give_the_same_messages(
    local_stack: StackInfo, kube_api_client: client.ApiClient, catalogue_cleanup: list[dict[str, Any]], entry: Entry,
) -> None:
    """Each document applied in file order: refused with `noderoll validate`'s lines for it, or admitted
    when validate's only objection is a reference the cluster may still get (ADMITTED)."""
    expected = validate_lines(entry.path)
    for doc in entry.documents:
        delete(kube_api_client, doc["kind"], doc["metadata"]["name"])  # left by an interrupted run
    for doc in entry.documents:
        catalogue_cleanup.append(doc)
        name = doc["metadata"]["name"]
        refusal = apply(kube_api_client, doc)
        admitted_why = ADMITTED.get((entry.id, name))
        if admitted_why is None and f"{doc['kind']}/{name}" not in expected:
            admitted_why = "noderoll validate finds nothing wrong with it"
        if admitted_why is not None:
            assert refusal is None, f"{name} ({admitted_why}) was refused: {refusal}"
            continue
        assert refusal is not None and refusal.startswith(DENIED), refusal
        assert refusal[len(DENIED):].splitlines() == expected[f"{doc['kind']}/{name}"]


@pytest.mark.parametrize("case", sorted(ISSUE_CASES), ids=str)
def test_kubectl_apply_is_refused_with_the_message(
    local_stack: StackInfo, kube_api_client: client.ApiClient, catalogue_cleanup: list[dict[str, Any]], case: str,
) -> None:
    path = ROOT / "tests" / "catalogue" / f"{case}.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    catalogue_cleanup.extend(docs)
    for doc in docs:
        delete(kube_api_client, doc["kind"], doc["metadata"]["name"])
    result = kubectl(local_stack, "apply", "-f", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert ISSUE_CASES[case] in result.stderr, result.stderr


def test_a_57_character_name_is_refused_by_kubectl(local_stack: StackInfo) -> None:
    name = "gpu-driver-550-for-the-h100-training-fleet-in-zone-a-" + uuid.uuid4().hex[:4]
    assert len(name) == 57
    doc = {"apiVersion": keys.API_VERSION, "kind": keys.PACKAGE_KIND, "metadata": {"name": name},
           "spec": package_spec(example_image("x"))}
    result = kubectl(local_stack, "apply", "-f", "-", stdin=yaml.safe_dump(doc))
    assert result.returncode == 1
    assert f"metadata.name '{name}' has 57 characters; use a lowercase DNS label of at most 43" in result.stderr


def renamed_examples(suffix: str) -> list[dict[str, Any]]:
    """The examples, every name (and reference) given `suffix`, Packages' selectors matching no node."""
    docs = [d for path in EXAMPLES for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        doc["metadata"]["name"] += suffix
        spec = doc["spec"]
        if doc["kind"] == keys.PACKAGE_KIND:
            spec["dependsOn"] = {dep + suffix: v for dep, v in (spec.get("dependsOn") or {}).items()}
            if spec.get("deploymentPolicy"):
                spec["deploymentPolicy"] += suffix
    return docs


def dependents_first(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Packages before what they need (dependents first), DeploymentPolicies last."""
    packages = {d["metadata"]["name"]: d for d in docs if d["kind"] == keys.PACKAGE_KIND}

    def depth(name: str) -> int:
        deps = packages[name]["spec"].get("dependsOn") or {}
        return 1 + max((depth(d) for d in deps if d in packages), default=0)

    ordered = sorted(packages, key=lambda n: (-depth(n), n))
    return [packages[n] for n in ordered] + [d for d in docs if d["kind"] == keys.POLICY_KIND]


def test_examples_are_admitted_in_any_order(
    local_stack: StackInfo, kube_api_client: client.ApiClient, tmp_path: Path,
) -> None:
    docs = renamed_examples("-" + uuid.uuid4().hex[:6])
    ordered = dependents_first(docs)
    first = ordered[0]["spec"]
    assert first.get("dependsOn") and first.get("deploymentPolicy"), "the order must put a dependent first"
    try:
        for doc in ordered:
            assert apply(kube_api_client, doc) is None, doc["metadata"]["name"]
        # And as a directory in file order (kubectl apply -f dir/): every object again, unchanged.
        for index, doc in enumerate(ordered):
            (tmp_path / f"{index:02d}.yaml").write_text(yaml.safe_dump(doc))
        result = kubectl(local_stack, "apply", "-f", f"{tmp_path}/")
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("unchanged") + result.stdout.count("configured") == len(ordered)
    finally:
        for doc in ordered:
            delete(kube_api_client, doc["kind"], doc["metadata"]["name"])


def package(name: str, version: str = "1.0.0", **spec: Any) -> dict[str, Any]:
    return package_object(name, package_spec(example_image(name, version), **spec))


def test_dependency_bumped_first_then_the_dependent(kube_api_client: client.ApiClient) -> None:
    base, app = unique_name("base"), unique_name("app")
    try:
        assert apply(kube_api_client, package(base)) is None
        assert apply(kube_api_client, package(app, dependsOn={base: "1.0.0"})) is None
        # The dependent first: refused while the dependency is stored at the old version.
        refusal = apply(kube_api_client, package(app, "1.1.0", dependsOn={base: "2.0.0"}))
        assert refusal == (f"{DENIED}Package/{app}: spec.dependsOn.{base}: needs {base} 2.0.0, but Package {base} "
                           "has version 1.0.0; depend on 1.0.0")
        # The dependency's bump is never refused for its dependents' sake; then the dependent follows.
        assert apply(kube_api_client, package(base, "2.0.0")) is None
        # The stored dependent now names a version that is gone: its metadata can still change ...
        patch = {"metadata": {"annotations": {"example.com/owner": "gpu-platform"}}}
        custom(kube_api_client).patch_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, app, patch)
        # ... a spec change that keeps the stale dependency is refused, the fix is admitted.
        refusal = apply(kube_api_client, package(app, "1.0.1", dependsOn={base: "1.0.0"}))
        assert refusal is not None and "has version 2.0.0; depend on 2.0.0" in refusal
        assert apply(kube_api_client, package(app, "1.1.0", dependsOn={base: "2.0.0"})) is None
    finally:
        delete(kube_api_client, keys.PACKAGE_KIND, app)
        delete(kube_api_client, keys.PACKAGE_KIND, base)


def review(api_version: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": keys.GROUP, "version": keys.VERSION, "kind": obj["kind"]},
        "resource": {"group": keys.GROUP, "version": keys.VERSION, "resource": PLURALS[obj["kind"]]},
        "name": obj["metadata"]["name"], "operation": "CREATE", "object": obj, "dryRun": True}}


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_the_running_webhook_answers_both_review_versions(local_stack: StackInfo, api_version: str) -> None:
    """POSTed to the stack's webhook process over TLS verified with the local CA, as the apiserver does."""
    url = f"https://127.0.0.1:{local_stack.components[WEBHOOK].ports['https']}/validate"
    context = ssl.create_default_context(cafile=str(Path(local_stack.state_dir) / "pki" / "ca.crt"))
    bad = package(unique_name("svc"), interrupt={"type": "service"})
    sent = review(api_version, bad)
    request = urllib.request.Request(url, json.dumps(sent).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        body = json.loads(answer.read())
    assert body["apiVersion"] == api_version and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == sent["request"]["uid"] and response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["details"]["causes"][0]["field"] == "spec.interrupt"


def test_while_a_webhook_with_our_rules_does_not_answer(kube_api_client: client.ApiClient) -> None:
    """failurePolicy Fail with nothing listening (a second configuration, only for objects carrying this
    test's label): creates and spec changes are refused; status writes and deletes go through."""
    label = unique_name("down")
    labels = {"noderoll.io/test-webhook-down": label}
    admission = client.AdmissionregistrationV1Api(kube_api_client)
    body = webhook_configuration("https://127.0.0.1:9", b"unused")
    body["metadata"]["name"] = label
    body["webhooks"][0]["objectSelector"] = {"matchLabels": labels}
    name = unique_name("down-pkg")
    stored = package(name)
    stored["metadata"]["labels"] = labels
    try:
        assert apply(kube_api_client, stored) is None  # stored before the outage
        admission.create_validating_webhook_configuration(body)

        def refused() -> bool:
            other = package(unique_name("down-new"))
            other["metadata"]["labels"] = labels
            refusal = apply(kube_api_client, other)
            assert refusal is not None and "failed calling webhook" in refusal, refusal
            return True

        assert_eventually(refused, timeout=30)
        # Any update of the object (spec or metadata: a finalizer, an annotation) is refused too ...
        for change in ({"spec": {"paused": True}}, {"metadata": {"annotations": {"noderoll.io/pause": "true"}}}):
            with pytest.raises(ApiException) as err:
                custom(kube_api_client).patch_cluster_custom_object(
                    keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name, change)
            assert "failed calling webhook" in json.loads(err.value.body)["message"]
        # ... the status subresource is not in the rules: the bridge's status writes go on; deletes too.
        custom(kube_api_client).patch_cluster_custom_object_status(
            keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name, {"status": {"message": "written during the outage"}})
        custom(kube_api_client).delete_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name)
    finally:
        admission.delete_validating_webhook_configuration(label)
        delete(kube_api_client, keys.PACKAGE_KIND, name)
