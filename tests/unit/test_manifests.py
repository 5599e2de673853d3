"""`api.manifests`: the noderoll objects of `-f` files as `kubectl apply` reads them (Lists expanded,
misspelled kinds refused, other API groups skipped)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from api.manifests import Manifests, manifest_objects, misspelled_kind
from api.yaml_source import parse

PACKAGE = {"apiVersion": "noderoll.io/v1alpha1", "kind": "Package", "metadata": {"name": "kernel"},
           "spec": {"version": "1.0.0"}}
POLICY = {"apiVersion": "noderoll.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": "gpu"}, "spec": {}}
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {}}


def read(*documents: Any) -> Manifests:
    return manifest_objects("f.yaml", parse(yaml.safe_dump_all(documents).encode()).documents)


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def test_noderoll_objects_are_kept_with_where_they_are() -> None:
    found = read(PACKAGE, POLICY)
    assert [(o.kind, o.name) for o in found.objects] == [("Package", "kernel"), ("DeploymentPolicy", "gpu")]
    assert found.objects[0].where == "f.yaml:1" and found.objects[1].where.startswith("f.yaml:")
    assert not found.problems and not found.skipped


def test_a_kubectl_list_is_expanded_and_its_foreign_items_skipped() -> None:
    # What `kubectl get packages,configmaps -o yaml` writes: `kind: List` in apiVersion v1.
    found = read({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                  "items": [PACKAGE, CONFIGMAP, POLICY]})
    assert [(o.kind, o.name) for o in found.objects] == [("Package", "kernel"), ("DeploymentPolicy", "gpu")]
    assert "(List item 0)" in found.objects[0].where and "(List item 2)" in found.objects[1].where
    assert len(found.skipped) == 1, found.skipped
    assert found.skipped[0].endswith("(List item 1): skipped ConfigMap/settings (apiVersion v1: not noderoll.io)")


@pytest.mark.parametrize("kind, item", [
    pytest.param("PackageList", {"metadata": {"name": "kernel"}, "spec": {}}, id="package-list"),
    pytest.param("DeploymentPolicyList", {"metadata": {"name": "gpu"}, "spec": {}}, id="policy-list"),
])
def test_a_typed_list_gives_its_items_its_kind(kind: str, item: dict[str, Any]) -> None:
    found = read({"apiVersion": "noderoll.io/v1alpha1", "kind": kind, "items": [item]})
    assert [(o.kind, o.name) for o in found.objects] == [(kind.removesuffix("List"), item["metadata"]["name"])]
    assert found.objects[0].obj["apiVersion"] == "noderoll.io/v1alpha1"


@pytest.mark.parametrize("document, message", [
    pytest.param(with_(PACKAGE, kind="Pakage"), "kind 'Pakage' is not a noderoll kind (did you mean Package?)",
                 id="misspelled-kind-in-noderoll-group"),
    pytest.param(with_(PACKAGE, kind="Widget"), "kind 'Widget' is not a noderoll kind; noderoll's kinds are",
                 id="unknown-kind-in-noderoll-group"),
    pytest.param(with_(PACKAGE, apiVersion="noderoll.io/v1beta1"), "Package in apiVersion 'noderoll.io/v1beta1' "
                 "is not served", id="unserved-version"),
    pytest.param(with_(PACKAGE, apiVersion="noderol.io/v1alpha1"), "apiVersion 'noderol.io/v1alpha1' is not "
                 "noderoll.io", id="near-miss-group"),
    pytest.param({k: v for k, v in PACKAGE.items() if k != "apiVersion"}, "a Package without apiVersion",
                 id="no-api-version"),
    pytest.param({"kind": "packages", "metadata": {"name": "x"}}, "kind 'packages' (apiVersion missing) reads as a "
                 "misspelled Package", id="plural-without-group"),
    pytest.param(with_(POLICY, apiVersion="v1", kind="DeploymentPolicies"), "kind 'DeploymentPolicies' "
                 "(apiVersion v1) reads as a misspelled DeploymentPolicy", id="plural-in-core-group"),
    pytest.param({"apiVersion": "noderoll.io/v1alpha1", "metadata": {"name": "x"}}, "has no kind", id="no-kind"),
    pytest.param(with_(PACKAGE, metadata={}), "a Package without metadata.name", id="no-name"),
    pytest.param(["a", "list"], "is a list, not a Kubernetes object", id="not-a-mapping"),
    pytest.param({"apiVersion": "v1", "kind": "List", "items": "none"}, "a List without a list of items",
                 id="list-without-items"),
    pytest.param({"apiVersion": "v1", "kind": "List", "items": [with_(PACKAGE, kind="Pakage")]},
                 "(List item 0): document 1: kind 'Pakage' is not a noderoll kind", id="misspelled-in-a-list"),
])
def test_a_document_meant_for_noderoll_that_is_not_readable_is_refused(document: Any, message: str) -> None:
    found = read(document)
    assert not found.objects and not found.skipped
    assert len(found.problems) == 1 and message in found.problems[0], found.problems
    assert found.problems[0].startswith("f.yaml:")


@pytest.mark.parametrize("document", [
    pytest.param(CONFIGMAP, id="configmap"),
    pytest.param({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}, id="deployment"),
    # Another operator's kind named Package (Carvel's): its group decides, not noderoll.
    pytest.param(with_(PACKAGE, apiVersion="data.packaging.carvel.dev/v1alpha1"), id="another-groups-package"),
    pytest.param({"kind": "Namespace", "metadata": {"name": "ns"}}, id="no-api-version-foreign-kind"),
    pytest.param({"apiVersion": "v1", "kind": "ConfigMapList", "items": [CONFIGMAP]}, id="foreign-typed-list"),
])
def test_a_document_of_another_api_group_is_skipped_with_a_note(document: dict[str, Any]) -> None:
    found = read(document, PACKAGE)
    assert [o.name for o in found.objects] == ["kernel"] and not found.problems
    assert len(found.skipped) == 1 and f"skipped {document['kind']}/" in found.skipped[0]
    assert "not noderoll.io" in found.skipped[0]


@pytest.mark.parametrize("kind, meant", [
    ("Package", None), ("DeploymentPolicy", None), ("package", "Package"), ("Packages", "Package"),
    ("Pakage", "Package"), ("DeploymentPolicies", "DeploymentPolicy"), ("deploymentpolicy", "DeploymentPolicy"),
    ("Deployment", None), ("Policy", None), ("Pod", None), ("", None),
])
def test_misspelled_kinds_are_recognised_and_neighbours_are_not(kind: str, meant: str | None) -> None:
    assert misspelled_kind(kind) == meant
