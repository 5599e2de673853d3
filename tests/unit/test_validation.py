"""Cross-document validation (api/validation.py) and `noderoll validate` (api/validate_command.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from api import validate_command
from api.validation import check_cycles, check_references, parse_document, validate_documents
from tests.helpers.packages import example_image

ROOT = Path(__file__).resolve().parents[2]


def pkg(name: str, version: str = "1.0.0", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "noderoll.io/v1alpha1",
        "kind": "Package",
        "metadata": {"name": name},
        "spec": {"version": version, "image": example_image(name, version)} | spec,
    }


def pol(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "noderoll.io/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": {"default": {"budget": {"count": 1}}},
    }


def lines(docs: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    return [str(p) for p in validate_documents(docs, **kwargs).problems]


def test_valid_set_resolves_references() -> None:
    result = validate_documents([pkg("a", dependsOn={"b": "1.0"}, deploymentPolicy="p"), pkg("b"), pol("p")])
    assert result.problems == [] and set(result.packages) == {"a", "b"} and set(result.policies) == {"p"}


def test_dependency_must_exist_at_that_version() -> None:
    assert lines([pkg("a", dependsOn={"b": "2.0.0"}), pkg("b")]) == [
        "Package/a: spec.dependsOn.b: needs b 2.0.0, but Package b has version 1.0.0; depend on 1.0.0"
    ]
    assert lines([pkg("a", dependsOn={"zz": "1.0.0"}), pkg("b")]) == [
        "Package/a: spec.dependsOn.zz: no Package 'zz'; known packages: b"
    ]


def test_cycles_name_the_path_on_each_member() -> None:
    problems = lines([pkg("a", dependsOn={"b": "1.0.0"}), pkg("b", dependsOn={"a": "1.0.0"}), pkg("c")])
    assert problems == [
        "Package/a: spec.dependsOn: dependency cycle a -> b -> a; remove one of these dependsOn entries",
        "Package/b: spec.dependsOn: dependency cycle a -> b -> a; remove one of these dependsOn entries",
    ]


def test_two_separate_cycles_are_both_reported() -> None:
    specs = {
        n: parse_document(d)[0].spec  # type: ignore[union-attr]
        for n, d in {
            "a": pkg("a", dependsOn={"b": "1.0.0"}),
            "b": pkg("b", dependsOn={"a": "1.0.0"}),
            "x": pkg("x", dependsOn={"y": "1.0.0"}),
            "y": pkg("y", dependsOn={"x": "1.0.0"}),
        }.items()
    }
    assert {p.name for p in check_cycles(specs)} == {"a", "b", "x", "y"}


def test_policy_reference() -> None:
    assert lines([pkg("a", deploymentPolicy="p")]) == [
        "Package/a: spec.deploymentPolicy: no DeploymentPolicy 'p'; known policies: none"
    ]
    assert lines([pkg("a", deploymentPolicy="p")], policies_known=False) == []


def test_check_references_for_the_bridge() -> None:
    package, _ = parse_document(pkg("a", dependsOn={"b": "1.0.0"}, deploymentPolicy="p"))
    assert package is not None
    assert [p.field for p in check_references(package, {}, policies=set())] == [  # type: ignore[arg-type]
        "spec.dependsOn.b",
        "spec.deploymentPolicy",
    ]
    assert check_references(package, {}, policies=None)[0].field == "spec.dependsOn.b"  # type: ignore[arg-type]


def test_other_groups_are_skipped_unknown_noderoll_kinds_are_not() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    wrong = {"apiVersion": "noderoll.io/v1beta9", "kind": "Package", "metadata": {"name": "x"}}
    assert lines([other]) == []
    (problem,) = lines([wrong])
    assert "use apiVersion noderoll.io/v1alpha1 with kind Package or DeploymentPolicy" in problem


def test_duplicate_names() -> None:
    assert lines([pkg("a"), pkg("a", "2.0.0")]) == [
        "Package/a: metadata.name: defined twice; each object needs a unique name"
    ]


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    validate_command.register(parser.add_subparsers())
    args = parser.parse_args(["validate", *argv])
    return args.func(args)


def test_cli_resolves_references_across_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump(pkg("a", dependsOn={"b": "1.0.0"}, deploymentPolicy="p")))
    second.write_text(yaml.safe_dump_all([pkg("b"), pol("p")]))
    assert run_cli([str(first), str(second)]) == 0
    assert run_cli([str(first)]) == 1
    out = capsys.readouterr().out.splitlines()
    # file:line (the line of the field in the file), kind/name, field, message.
    assert f"{first}:7: Package/a: spec.dependsOn.b: no Package 'b'; known packages: none" in out


def test_cli_reports_unreadable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed")
    assert run_cli([str(bad), str(tmp_path / "missing.yaml")]) == 2
    out, err = capsys.readouterr()
    assert f"{bad}:2: YAML syntax error" in out  # the end of the file, where a ] was due and "missing.yaml: cannot read" in out
    assert err.endswith("2 file error(s): invalid\n")


def test_cli_accepts_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    examples = sorted(str(p) for p in (ROOT / "deploy" / "examples").glob("*.yaml"))
    assert run_cli(examples) == 0
    assert capsys.readouterr().err.endswith(" valid, 0 invalid, 0 skipped; 0 file error(s): valid\n")
