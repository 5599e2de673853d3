"""`noderoll import`'s mapping (api/nodewright_import.py and its converters), table by table.

Inputs are the manifests of tests/fixtures/nodewright (written here from NodeWright's documentation)
and small Skyhooks built in the tests; the expected noderoll documents are written by hand next to
each fixture (`*.expected.yaml`). Every document an import writes must pass noderoll's own checks
(`api.validation.check_document`, then the cross-document ones); the hypothesis tests of the same
promise are in tests/unit/test_nodewright_import_random.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from api.nodewright_import import (
    ImportOptions,
    ImportResult,
    ImportUsageError,
    NameStyle,
    Severity,
    import_documents,
)
from api.validation import check_document, validate_documents
from api.yaml_source import parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nodewright"
NC, NI, NOTE = Severity.NOT_CARRIED, Severity.NOT_IMPORTED, Severity.NOTE
PKG = "spec.packages"

# Fixture -> every note expected: (field, severity, a fragment of the message).
EXPECTED_NOTES: dict[str, list[tuple[str, Severity, str]]] = {
    "skyhook-every-field": [],
    "nodewright-with-policy": [],
    "kubectl-get-list": [
        ("items[0]", NOTE, "the same object as NodeWright/node-setup of nodewright.nvidia.com"),
    ],
    "skyhook-unmappable": [
        ("spec.priority", NC, "write it as dependsOn"),
        ("spec.sequencing", NC, "'all' is not carried"),
        ("spec.autoTaintNewNodes", NC, "noderoll always taints nodes that join"),
        ("spec.deploymentPolicyOptions.resetBatchStateOnCompletion", NC, "each noderoll wave starts from its first"),
        ("spec.additionalTolerations[0]", NC, "operator Exists takes no value"),
        ("metadata.annotations.skyhook.nvidia.com/disable", NC, "the Packages are written paused"),
        ("metadata.labels", NC, "not copied"),
        ("spec.interruptionBudget.count", NC, "written as count 1"),
        ("spec.drainConfig.timeout", NC, "0 (wait forever) cannot be carried"),
        ("spec.drainConfig.disableEviction", NC, "PodDisruptionBudgets hold"),
        ("spec.drainConfig.force", NC, "pods without a controller"),
        ("spec.drainConfig.ignoreDaemonSets", NC, "never evicts DaemonSet pods"),
        (f"{PKG}.monitoring-agent.image", NC, "tag 'latest' left out: NodeWright pulls the package image by its "
         "version (ghcr.io/example/monitoring-agent:3.2.1)"),
        (f"{PKG}.monitoring-agent.interrupt", NC, "written as noop"),
        (f"{PKG}.monitoring-agent.configInterrupts.[ab].conf", NOTE, "the keys it matches now (a.conf, b.conf)"),
        (f"{PKG}.monitoring-agent.configInterrupts.missing.conf", NC, "matches no configMap key"),
        (f"{PKG}.monitoring-agent.env[0].valueFrom", NC, "variable 'API_TOKEN' left out"),
        (f"{PKG}.monitoring-agent.uninstall.apply", NC, "needs enabled: true"),
        (f"{PKG}.monitoring-agent.gracefulShutdown", NC, "default termination grace period"),
        (f"{PKG}.crash-dump.interrupt.type", NI, "package crash-dump not imported: 'kexec' is not an interrupt type"),
        (f"{PKG}.crash-dump-config.dependsOn.crash-dump", NI, "depends on crash-dump, which is not imported"),
    ],
}


def load_fixture(name: str) -> list[Any]:
    return [doc.data for doc in parse((FIXTURES / f"{name}.yaml").read_bytes()).documents]


def expected_documents(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((FIXTURES / f"{name}.expected.yaml").read_text()))


def documents(result: ImportResult) -> list[dict[str, Any]]:
    return [item.document for item in result.documents]


def notes(result: ImportResult) -> list[tuple[str, Severity]]:
    return [(note.field, note.severity) for note in result.notes]


def assert_valid(result: ImportResult) -> None:
    """Every document passes check_document, and together the cross-document checks."""
    for doc in documents(result):
        assert check_document(doc).valid, check_document(doc).problems
    assert validate_documents(documents(result), policies_known=False).problems == []


@pytest.mark.parametrize("name", sorted(EXPECTED_NOTES))
def test_fixture_imports_as_written_by_hand(name: str) -> None:
    result = import_documents(load_fixture(name))
    assert documents(result) == expected_documents(name)
    expected = EXPECTED_NOTES[name]
    assert sorted(notes(result)) == sorted((field, severity) for field, severity, _ in expected)
    by_field = {note.field: note.message for note in result.notes}
    for field, _, fragment in expected:
        assert fragment in by_field[field], by_field[field]
    assert result.failed == any(severity is NI for _, severity, _ in expected)
    assert_valid(result)
    # With their policies among the documents, the references resolve too.
    assert validate_documents(documents(result)).problems == []


def test_fixtures_cover_every_nodewright_field() -> None:
    """The fixtures set each Skyhook, package, drainConfig and policy field NodeWright defines."""
    from api.nodewright_skyhook import PACKAGE_FIELDS, SKYHOOK_FIELDS

    seen_spec: set[str] = set()
    seen_package: set[str] = set()
    seen_policy: set[str] = set()
    for name in EXPECTED_NOTES:
        for doc in load_fixture(name):
            for item in doc.get("items", [doc]):
                spec = item.get("spec", {})
                if item["kind"] in ("Skyhook", "NodeWright"):
                    seen_spec |= set(spec)
                    for package in spec.get("packages", {}).values():
                        seen_package |= set(package)
                elif item["kind"] == "DeploymentPolicy":
                    seen_policy |= set(spec)
    assert seen_spec >= SKYHOOK_FIELDS
    assert seen_package >= PACKAGE_FIELDS - {"name"}  # `name` must equal the key: set in a test below
    assert seen_policy == {"default", "compartments", "resetBatchStateOnCompletion"}


def skyhook(name: str = "foo", kind: str = "Skyhook", **spec: Any) -> dict[str, Any]:
    group = "skyhook.nvidia.com" if kind == "Skyhook" else "nodewright.nvidia.com"
    packages = spec.pop("packages", {"a": {"version": "1.0.0", "image": "x/a"},
                                     "b": {"version": "2.0.0", "image": "x/b", "dependsOn": {"a": "1.0.0"}}})
    return {"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {"packages": packages, **spec}}


def nw_policy(name: str, group: str = "skyhook.nvidia.com") -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": name},
            "spec": {"default": {"budget": {"count": 2}, "strategy": {"fixed": {}}}}}


def summary(result: ImportResult) -> list[tuple[str, str, dict[str, str], str | None]]:
    """(kind, name, dependsOn, deploymentPolicy) per document written."""
    return [(d["kind"], d["metadata"]["name"], d["spec"].get("dependsOn", {}), d["spec"].get("deploymentPolicy"))
            for d in documents(result)]


@pytest.mark.parametrize(
    ("docs", "options", "expected"),
    [
        pytest.param([skyhook()], ImportOptions(), [("Package", "a", {}, None), ("Package", "b", {"a": "1.0.0"}, None)],
                     id="packages-keep-their-names"),
        pytest.param([skyhook()], ImportOptions(names=NameStyle.SKYHOOK_PACKAGE),
                     [("Package", "foo-a", {}, None), ("Package", "foo-b", {"foo-a": "1.0.0"}, None)],
                     id="skyhook-package-names-and-dependsOn-follow"),
        pytest.param([skyhook(interruptionBudget={"count": 2})], ImportOptions(),
                     [("DeploymentPolicy", "foo", {}, None), ("Package", "a", {}, "foo"),
                      ("Package", "b", {"a": "1.0.0"}, "foo")], id="budget-policy-named-after-the-skyhook"),
        pytest.param([skyhook(interruptionBudget={"count": 2})], ImportOptions(policy_name="gpu"),
                     [("DeploymentPolicy", "gpu", {}, None), ("Package", "a", {}, "gpu"),
                      ("Package", "b", {"a": "1.0.0"}, "gpu")], id="bare-policy-name"),
        pytest.param([skyhook(deploymentPolicy="default"), nw_policy("default")],
                     ImportOptions(policy_names={"default": "gpu"}),
                     [("DeploymentPolicy", "gpu", {}, None), ("Package", "a", {}, "gpu"),
                      ("Package", "b", {"a": "1.0.0"}, "gpu")], id="renamed-policy-and-its-references"),
        pytest.param([skyhook("foo", packages={"b": {"version": "1.0.0", "image": "x/b", "dependsOn": {"a": "1.0.0"}},
                                               "a": {"version": "1.0.0", "image": "x/a"}})], ImportOptions(),
                     [("Package", "a", {}, None), ("Package", "b", {"a": "1.0.0"}, None)],
                     id="dependencies-written-first"),
        pytest.param([skyhook("foo"), skyhook("bar")], ImportOptions(names=NameStyle.SKYHOOK_PACKAGE),
                     [("Package", "foo-a", {}, None), ("Package", "foo-b", {"foo-a": "1.0.0"}, None),
                      ("Package", "bar-a", {}, None), ("Package", "bar-b", {"bar-a": "1.0.0"}, None)],
                     id="two-skyhooks-same-packages-prefixed"),
    ],
)
def test_names(docs: list[dict[str, Any]], options: ImportOptions, expected: list[Any]) -> None:
    result = import_documents(docs, options)
    assert summary(result) == expected
    assert not result.failed
    assert_valid(result)


@pytest.mark.parametrize(
    ("docs", "options", "field", "fragment"),
    [
        pytest.param([skyhook("foo"), skyhook("bar")], ImportOptions(), "spec.packages.a",
                     "the Package name 'a' is made by Skyhook/foo package a, Skyhook/bar package a; noderoll names are "
                     "cluster-wide: pass --names skyhook-package", id="same-package-in-two-skyhooks"),
        pytest.param([skyhook("x" * 42)], ImportOptions(names=NameStyle.SKYHOOK_PACKAGE), "spec.packages.a",
                     "has 44 characters", id="prefixed-name-too-long"),
        pytest.param([skyhook("default", interruptionBudget={"percent": 10})], ImportOptions(), "spec.interruptionBudget",
                     "'default' is reserved in noderoll (its built-in fleet); pass --policy-name default=NEW",
                     id="budget-policy-named-default"),
        pytest.param([skyhook("gpu.example.com", interruptionBudget={"count": 1})], ImportOptions(),
                     "spec.interruptionBudget", "pass --policy-name gpu.example.com=NEW", id="budget-policy-not-a-label"),
        pytest.param([skyhook("foo", interruptionBudget={"count": 1}), nw_policy("foo")], ImportOptions(),
                     "spec.interruptionBudget", "would be made by DeploymentPolicy/foo and by the interruptionBudget of "
                     "Skyhook/foo; pass --policy-name foo=NEW", id="budget-policy-clashes-with-a-policy"),
        pytest.param([skyhook(deploymentPolicy="default")], ImportOptions(), "spec.deploymentPolicy",
                     "pass --policy-name default=NEW", id="reference-to-a-policy-named-default"),
        pytest.param([skyhook(nodeSelectors={"matchExpressions": [{"key": "gpu", "operator": "In"}]})], ImportOptions(),
                     "spec.nodeSelectors", "operator In needs a non-empty values list", id="unreadable-node-selector"),
        pytest.param([skyhook(packages={"a": {"version": 1.1, "image": "x/a"}})], ImportOptions(),
                     "spec.packages.a.version", "is float, not a version string (quote it)", id="unquoted-version"),
        pytest.param([skyhook(packages={"a": {"version": "01.2", "image": "x/a"}})], ImportOptions(),
                     "spec.packages.a.version", "is not a valid version", id="invalid-version"),
        pytest.param([skyhook(packages={"a": {"version": "1.0.0", "image": "x/a", "configMap": {"noderoll.meta": "x"}}})],
                     ImportOptions(), "spec.packages.a.configMap.noderoll.meta", "hold the node's metadata",
                     id="reserved-config-key"),
        pytest.param([skyhook(packages={"a": {"version": "1.0.0", "image": "x/a", "dependsOn": {"b": "1.0.0"}},
                                        "b": {"version": "1.0.0", "image": "x/b", "dependsOn": {"a": "1.0.0"}}})],
                     ImportOptions(), "spec.packages.a.dependsOn", "dependency cycle a -> b -> a", id="cycle"),
        pytest.param([skyhook(packages={"a": {"version": "1.0.0", "image": "x/a"},
                                        "b": {"version": "1.0.0", "image": "x/b", "dependsOn": {"a": "2.0.0"}}})],
                     ImportOptions(), "spec.packages.b.dependsOn.a", "Package a has version 1.0.0", id="wrong-version"),
        pytest.param([skyhook(packages={"b": {"version": "1.0.0", "image": "x/b", "dependsOn": {"z": "1.0.0"}}})],
                     ImportOptions(), "spec.packages.b.dependsOn.z", "no package 'z' in this Skyhook",
                     id="dependency-not-in-the-skyhook"),
        pytest.param([skyhook(packages={"a": {"version": "1.0.0", "image": "x/a", "containerSHA": "sha256:abc"}})],
                     ImportOptions(), "spec.packages.a.containerSHA", "not sha256:<64", id="bad-container-sha"),
        pytest.param([{"apiVersion": "skyhook.nvidia.com/v1beta1", "kind": "Skyhook", "metadata": {"name": "x"}}],
                     ImportOptions(), "apiVersion", "is not read; NodeWright serves", id="unknown-version"),
        pytest.param([{"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "Package", "metadata": {"name": "x"}}],
                     ImportOptions(), "apiVersion", "is not read; NodeWright serves", id="unknown-kind"),
        pytest.param([skyhook("foo"), skyhook("foo")], ImportOptions(), "metadata.name", "defined twice",
                     id="same-skyhook-twice"),
    ],
)
def test_not_imported(docs: list[dict[str, Any]], options: ImportOptions, field: str, fragment: str) -> None:
    result = import_documents(docs, options)
    assert result.failed
    lines = [n.message for n in result.notes if n.field == field and n.severity is NI]
    assert any(fragment in line for line in lines), [str(n) for n in result.notes]
    assert_valid(result)


def test_a_skyhook_with_an_unreadable_selector_writes_nothing() -> None:
    """Leaving the selector out would target every node: neither the policy nor a Package is written."""
    bad = skyhook(interruptionBudget={"count": 1}, nodeSelectors={"matchLabels": {"bad key!": "x"}})
    assert documents(import_documents([bad])) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ImportOptions(policy_names={"nope": "x"}), "--policy-name nope=...: no DeploymentPolicy, and no Skyhook"),
        (ImportOptions(policy_name="x"), "2 Skyhooks of the input get a policy from their interruptionBudget"),
    ],
)
def test_options_that_do_not_fit_the_input(options: ImportOptions, message: str) -> None:
    docs = [skyhook("foo", interruptionBudget={"count": 1}), skyhook("bar", interruptionBudget={"count": 1})]
    with pytest.raises(ImportUsageError) as raised:
        import_documents(docs, options)
    assert message in str(raised.value)


def test_a_policy_outside_the_input_is_referenced_with_a_note() -> None:
    result = import_documents([skyhook(deploymentPolicy="fleet-a")])
    assert {d["spec"]["deploymentPolicy"] for d in documents(result)} == {"fleet-a"}
    assert [(n.field, n.severity) for n in result.notes] == [("spec.deploymentPolicy", NOTE)]
    assert "'fleet-a' is not among the objects written" in result.notes[0].message


def test_paused_option_and_pause_fields() -> None:
    result = import_documents([skyhook()], ImportOptions(paused=True))
    assert all(d["spec"]["paused"] is True for d in documents(result))
    old = import_documents([skyhook(pause=True)])  # spec.pause of NodeWright <= 0.7
    assert all(d["spec"]["paused"] is True for d in documents(old))
    annotated = skyhook(kind="NodeWright")
    annotated["metadata"]["annotations"] = {"nodewright.nvidia.com/pause": "true"}
    assert all(d["spec"]["paused"] is True for d in documents(import_documents([annotated])))
    assert all("paused" not in d["spec"] for d in documents(import_documents([skyhook()])))


def test_paused_option_keeps_the_notes_on_pause_and_disable() -> None:
    disabled = skyhook()
    disabled["metadata"]["annotations"] = {"skyhook.nvidia.com/disable": "true"}
    result = import_documents([disabled], ImportOptions(paused=True))
    assert ("metadata.annotations.skyhook.nvidia.com/disable", NC) in notes(result)


def test_budget_policy_is_written_only_with_a_package() -> None:
    lonely = skyhook(interruptionBudget={"count": 2}, packages={"a": {"version": "1.0.0", "image": "x/a",
                                                                      "interrupt": {"type": "kexec"}}})
    result = import_documents([lonely])
    assert documents(result) == []
    assert notes(result) == [("spec.packages.a.interrupt.type", NI)]


def test_budget_and_policy_together_carry_the_policy() -> None:
    result = import_documents([skyhook(deploymentPolicy="p", interruptionBudget={"count": 1}), nw_policy("p")])
    assert [d["metadata"]["name"] for d in documents(result)] == ["p", "a", "b"]
    assert ("spec.interruptionBudget", NC) in notes(result)


def test_no_budget_joins_the_default_fleet_with_a_note() -> None:
    result = import_documents([skyhook()])
    assert all("deploymentPolicy" not in d["spec"] for d in documents(result))
    assert notes(result) == [("spec.interruptionBudget", NOTE)]
    assert "NodeWright updated every matching node at once" in result.notes[0].message


def test_package_name_field_differing_from_the_key() -> None:
    result = import_documents([skyhook(packages={"a": {"name": "other", "version": "1.0.0", "image": "x/a"}})])
    assert [d["metadata"]["name"] for d in documents(result)] == ["a"]
    assert ("spec.packages.a.name", NC) in notes(result)


def test_a_skyhook_without_packages_writes_nothing() -> None:
    result = import_documents([skyhook(packages={}, interruptionBudget={"count": 1})])
    assert (documents(result), notes(result)) == ([], [("spec.packages", NOTE)])


def test_other_documents_are_skipped() -> None:
    result = import_documents([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, "text", None])
    assert (result.read, documents(result), len(result.skipped)) == (0, [], 3)
