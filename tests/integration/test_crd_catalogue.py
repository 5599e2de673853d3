"""The CRDs on the real kube-apiserver of the test bed (1.20): install, defaults, explain, examples, catalogue.

* the CRDs of deploy/crds are accepted and become Established;
* `kubectl explain packages.spec` (and deploymentpolicies.spec) shows documented fields;
* every deploy/examples/*.yaml is accepted (`kubectl apply --dry-run=server`) and valid for the models;
* schema defaults are applied by the apiserver (drain timeout 600 s, strategy defaults);
* every schema-level catalogue document is refused by the apiserver with its expected message (the
  semantic ones pass the schema and meet the admission webhook: tests/integration/test_webhook.py).
* a status rendered by planning/views/status.py is stored by the status subresource without pruning,
  and `kubectl get pkg -o wide` shows the printer columns.
All writes but the last test's are dry runs; that one creates a paused Package targeting no node.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from api import keys
from api.enums import CanaryPhase, RolloutPhase
from api.validation import validate_documents
from planning.views.status import RolloutProgress, render_package_status
from tests.catalogue import Entry, load
from tests.helpers import assert_eventually, unique_name
from tests.helpers.packages import example_image, package_spec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
PLURALS = {keys.PACKAGE_KIND: keys.PACKAGE_PLURAL, keys.POLICY_KIND: keys.POLICY_PLURAL}


def _apply_crd(ext: client.ApiextensionsV1Api, doc: dict[str, Any]) -> None:
    try:
        ext.create_custom_resource_definition(doc)
    except ApiException as err:
        if err.status != 409:
            raise
        current = ext.read_custom_resource_definition(doc["metadata"]["name"])
        body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": current.metadata.resource_version}}
        ext.replace_custom_resource_definition(doc["metadata"]["name"], body)


@pytest.fixture(scope="module")
def crds(kube_api_client: client.ApiClient) -> list[str]:
    """Apply the CRDs of this checkout (the stack may run older ones) and wait until Established."""
    ext = client.ApiextensionsV1Api(kube_api_client)
    names = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            _apply_crd(ext, doc)
            names.append(doc["metadata"]["name"])

    def established() -> bool:
        for name in names:
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            assert any(c.type == "Established" and c.status == "True" for c in conditions), name
        return True

    assert_eventually(established, timeout=30)
    return names


def dry_run_create(api: client.ApiClient, doc: dict[str, Any]) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    return custom.create_cluster_custom_object(
        keys.GROUP, keys.VERSION, PLURALS[doc["kind"]], doc, dry_run="All"
    )


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_crds_are_established(crds: list[str]) -> None:
    assert sorted(crds) == ["deploymentpolicies.noderoll.io", "packages.noderoll.io"]


@pytest.mark.parametrize(
    ("resource", "fields"),
    [
        (
            "packages.spec",
            ["version", "image", "interrupt", "dependsOn", "drain", "uninstall", "Package version"],
        ),
        ("packages.spec.interrupt", ["services", "reboot, restartAllServices, service"]),
        ("packages.status", ["conditions", "observedGeneration", "blockedNodes", "currentBatch"]),
        ("deploymentpolicies.spec", ["default", "compartments", "canary"]),
        ("deploymentpolicies.spec.default.strategy", ["batchThreshold", "failureThreshold", "safetyLimit"]),
    ],
)
def test_kubectl_explain_shows_documented_fields(
    local_stack: Any, crds: list[str], resource: str, fields: list[str]
) -> None:
    def explained() -> str:
        result = kubectl(str(local_stack.kubeconfig), "explain", resource)
        assert result.returncode == 0, result.stderr
        for field in fields:
            assert field in result.stdout
        return result.stdout

    out = assert_eventually(explained, timeout=30, interval=1.0)
    assert "<empty>" not in out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_apply_and_validate(local_stack: Any, crds: list[str], path: Path) -> None:
    result = kubectl(str(local_stack.kubeconfig), "apply", "--dry-run=server", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert "(server dry run)" in result.stdout


def test_examples_are_valid_together() -> None:
    docs = [d for path in EXAMPLES for d in yaml.safe_load_all(path.read_text()) if d]
    result = validate_documents(docs)
    assert result.problems == []
    assert len(result.packages) >= 4 and len(result.policies) >= 2


def test_schema_defaults_are_applied(kube_api_client: client.ApiClient, crds: list[str]) -> None:
    pkg = dry_run_create(
        kube_api_client,
        {
            "apiVersion": keys.API_VERSION,
            "kind": keys.PACKAGE_KIND,
            "metadata": {"name": "defaults-check"},
            "spec": package_spec(example_image("x", "1.2")),
        },
    )
    assert pkg["spec"]["drain"] == {"timeoutSeconds": 600, "deleteEmptyDirData": False}
    assert pkg["spec"]["uninstall"] == {"enabled": False, "apply": False}
    policy = dry_run_create(
        kube_api_client,
        {
            "apiVersion": keys.API_VERSION,
            "kind": keys.POLICY_KIND,
            "metadata": {"name": "defaults-check"},
            "spec": {"default": {"budget": {"count": 1}}, "canary": {}},
        },
    )
    assert policy["spec"]["default"]["strategy"] == {
        "type": "fixed",
        "initialBatch": 1,
        "batchThreshold": 100,
        "safetyLimit": 50,
    }
    assert policy["spec"]["canary"] == {"count": 1, "soakSeconds": 0, "promotion": "auto", "onFailure": "halt"}


SCHEMA = [e for e in load() if e.level == "schema"]


@pytest.mark.parametrize("entry", SCHEMA, ids=lambda e: e.id)
def test_apiserver_refuses_schema_level_documents(
    kube_api_client: client.ApiClient, crds: list[str], entry: Entry
) -> None:
    (doc,) = entry.documents
    with pytest.raises(ApiException) as err:
        dry_run_create(kube_api_client, doc)
    assert err.value.status == 422
    message = json.loads(err.value.body)["message"]
    assert entry.apiserver_message_matches(message), message


def test_rendered_status_is_stored_unpruned_and_shown_in_columns(
    local_stack: Any, kube_api_client: client.ApiClient, crds: list[str]
) -> None:
    """planning.views.status output fits the status schema: the apiserver stores it without pruning a field."""
    custom = client.CustomObjectsApi(kube_api_client)
    name = unique_name("status-check")
    body = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.PACKAGE_KIND,
        "metadata": {"name": name},
        # Paused and targeting no node: a bridge running on the shared stack has nothing to roll out.
        "spec": package_spec(example_image("x"), labels={"noderoll.io/test-none": name}, paused=True),
    }
    created = custom.create_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, body)
    try:
        progress = RolloutProgress(
            phase=RolloutPhase.HALTED,
            version="1.0.0",
            total_nodes=3,
            counts={"complete": 1, "erroring": 1, "blocked": 1},
            batch_number=2,
            batch_size=2,
            canary_phase=CanaryPhase.PASSED,
            canary_nodes=["n0"],
            blocked={"n2": "drain blocked by PodDisruptionBudget web/db"},
            erroring={"n1": "apply-check exited 1"},
            message="halted: compartment default failed",
            updated_at="2026-01-01T00:00:00Z",
        )
        status = render_package_status(progress, created["metadata"]["generation"])
        stored = custom.patch_cluster_custom_object_status(
            keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name, {"status": status}
        )
        assert stored["status"] == status
        table = kubectl(str(local_stack.kubeconfig), "get", "pkg", name, "-o", "wide")
        assert table.returncode == 0, table.stderr
        header = table.stdout.splitlines()[0].split()
        assert header[:7] == ["NAME", "VERSION", "PHASE", "PROGRESS", "BATCH", "ETA", "READY"]
        assert "POLICY" in header and "MESSAGE" in header
    finally:
        custom.delete_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, name)
