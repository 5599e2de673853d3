"""The CRDs in deploy/crds: generated and committed in sync, structural, documented, matching the models."""

from __future__ import annotations

import importlib.util
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from api.package import PackageSpec
from api.policy import DeploymentPolicySpec
from api.status import PackageStatus, PolicyStatus

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def crd_schema(plural: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "deploy" / "crds" / f"{plural}.noderoll.io.yaml").read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_crds_are_generated_from_the_script() -> None:
    rendered = load_script("gen_crds").render()
    for name, text in rendered.items():
        assert (ROOT / "deploy" / "crds" / name).read_text() == text, "run: python scripts/gen_crds.py"


def walk(schema: dict[str, Any], path: str = "") -> typing.Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in (schema.get("properties") or {}).items():
        yield from walk(prop, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("plural", ["packages", "deploymentpolicies"])
def test_schema_is_structural_and_documented(plural: str) -> None:
    for path, node in walk(crd_schema(plural)):
        if path == "metadata":
            continue
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        scalar_member = path.endswith(("[]", "{}")) and node.get("type") != "object"
        assert node.get("description") or scalar_member, f"{path} has no description"
        assert "x-kubernetes-validations" not in node, "CEL needs Kubernetes 1.25; the test bed runs 1.20"
        for junctor in ("oneOf", "anyOf", "allOf"):
            for branch in node.get(junctor, []):
                assert set(branch) <= {"required"}, f"{path}.{junctor} may only hold required (structural)"


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside Optional/list/dict annotations, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_of(arg)
        if found is not None:
            return found
    return None


def compare(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[str]:
    """Differences between a model's fields (by alias) and a schema's properties, recursively."""
    problems = []
    while "properties" not in schema and ("items" in schema or "additionalProperties" in schema):
        schema = schema.get("items") or schema["additionalProperties"]
    props = schema.get("properties") or {}
    fields = {(info.alias or name): info for name, info in model.model_fields.items()}
    for missing in sorted(set(fields) - set(props)):
        problems.append(f"{path}.{missing}: in the model, not in the CRD")
    for extra in sorted(set(props) - set(fields)):
        problems.append(f"{path}.{extra}: in the CRD, not in the model")
    for alias, info in fields.items():
        nested = model_of(info.annotation)
        if nested is not None and alias in props:
            problems.extend(compare(nested, props[alias], f"{path}.{alias}"))
    return problems


@pytest.mark.parametrize(
    ("plural", "part", "model"),
    [
        ("packages", "spec", PackageSpec),
        ("packages", "status", PackageStatus),
        ("deploymentpolicies", "spec", DeploymentPolicySpec),
        ("deploymentpolicies", "status", PolicyStatus),
    ],
)
def test_models_and_schemas_have_the_same_fields(plural: str, part: str, model: type[BaseModel]) -> None:
    assert compare(model, crd_schema(plural)["properties"][part], part) == []


def test_names_columns_and_status_subresource() -> None:
    for plural, short in (("packages", {"pkg", "nrpkg"}), ("deploymentpolicies", {"dp", "nrdp"})):
        doc = yaml.safe_load((ROOT / "deploy" / "crds" / f"{plural}.noderoll.io.yaml").read_text())
        spec = doc["spec"]
        assert spec["scope"] == "Cluster" and set(spec["names"]["shortNames"]) == short
        version = spec["versions"][0]
        assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
        assert any(c["name"] == "Age" for c in version["additionalPrinterColumns"])
