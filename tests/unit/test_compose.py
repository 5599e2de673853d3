"""docker-compose.yml and the Dockerfiles refer to things that exist (no Docker engine needed).

Parses the compose file and the Dockerfiles, and checks them against the code: the commands the
containers run are real `noderoll` sub-commands with valid flags, the environment variables are ones
the code reads, build contexts, Dockerfiles and copied paths exist, and entry points name real modules.
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.main import build_parser
from localstack.rootfs import source_packages

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
PRODUCT_DIRS = ("api", "planning", "workflows", "activities", "worker", "cli", "demo", "service", "crd_bridge", "localstack",
                "agent", "protocol", "metrics", "kube")
DOCKERFILES = {
    "Dockerfile": ROOT,
    "deploy/package-base/Dockerfile": ROOT,
    "deploy/package-base/Package.Dockerfile": ROOT / "deploy" / "examples" / "packages" / "sysctl-tuning",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def code_reads(name: str) -> bool:
    return any(name in path.read_text() for d in PRODUCT_DIRS for path in (ROOT / d).rglob("*.py"))


def test_services_temporal_ui_persistence_worker_bridge(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgresql", "temporal", "temporal-ui", "worker", "bridge"} <= set(services)
    assert "postgresql" in services["temporal"]["depends_on"]
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert any(v.startswith("temporal-db:") for v in services["postgresql"]["volumes"])
    assert "temporal-db" in compose["volumes"]


def test_search_attributes_registered_are_the_contract_ones(compose: dict[str, Any]) -> None:
    from protocol.names import SEARCH_ATTRIBUTE_TYPES

    script = " ".join(compose["services"]["temporal-setup"]["command"])
    assert dict(re.findall(r"(Noderoll\w+):(\w+)", script)) == SEARCH_ATTRIBUTE_TYPES


@pytest.mark.parametrize("service", ["worker", "bridge"])
def test_noderoll_services_run_real_commands(compose: dict[str, Any], service: str) -> None:
    if service == "bridge" and not (ROOT / "crd_bridge" / "command.py").exists():
        pytest.skip("`noderoll bridge` (crd_bridge/command.py) has not landed yet")
    spec = compose["services"][service]
    context = ROOT / spec["build"]["context"]
    assert (context / spec["build"]["dockerfile"]).is_file()
    parser = build_parser()
    commands = {name for action in parser._subparsers._group_actions for name in action.choices}
    assert spec["command"][0] == service and service in commands, f"`noderoll {service}` is not registered"
    args = parser.parse_args(spec["command"])
    assert callable(args.func)


@pytest.mark.parametrize("service", ["worker", "bridge"])
def test_noderoll_services_environment_is_read_by_the_code(compose: dict[str, Any], service: str) -> None:
    spec = compose["services"][service]
    env = spec["environment"]
    for name in env:
        assert name == "KUBECONFIG" or code_reads(name), f"{name} is read by no module"
    # Metrics: the published port maps to the port the process is told to serve on.
    published = {p.split(":")[1] for p in spec["ports"]}
    assert env["NODEROLL_METRICS_PORT"] in published
    # The kubeconfig comes from the user's home, read-only, and KUBECONFIG points into it.
    mount = next(v for v in spec["volumes"] if v.endswith(":ro"))
    assert env["KUBECONFIG"].startswith(mount.rsplit(":", 2)[1] + "/")
    assert "~/.kube" in mount


@pytest.mark.parametrize("dockerfile", sorted(DOCKERFILES), ids=lambda d: d.replace("/", "_"))
def test_dockerfile_copies_existing_paths(dockerfile: str) -> None:
    context = DOCKERFILES[dockerfile]
    steps = instructions(ROOT / dockerfile)
    assert steps[0][0] in ("FROM", "ARG")
    for op, rest in steps:
        if op == "COPY" and "--from=" not in rest:
            sources = rest.split()[:-1]
            for source in sources:
                assert (context / source).exists(), f"{dockerfile}: COPY {source} (context {context})"


def test_the_images_carry_every_package_of_the_project() -> None:
    # The Dockerfile and the real-node image (localstack/rootfs.py) once missed `protocol`: every
    # process in them failed to import. pyproject.toml's list of packages is the one source.
    packages = source_packages(ROOT)
    assert {"api", "protocol", "webhook", "worker"} <= set(packages)
    copied = {rest.split()[0].rstrip("/") for op, rest in instructions(ROOT / "Dockerfile")
              if op == "COPY" and "--from=" not in rest}
    assert set(packages) <= copied, sorted(set(packages) - copied)
    assert all((ROOT / p / "__init__.py").is_file() for p in packages)
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}
    assert tops <= set(packages), sorted(tops - set(packages))


def test_worker_image_entrypoint_is_the_console_script() -> None:
    steps = dict(instructions(ROOT / "Dockerfile"))
    assert steps["FROM"].startswith("python:3.11-slim")
    assert json.loads(steps["ENTRYPOINT"]) == ["noderoll"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = scripts["noderoll"].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    # Every product package is copied into the build, so the wheel holds the whole CLI.
    copied = {rest.split()[0].rstrip("/") for op, rest in instructions(ROOT / "Dockerfile") if op == "COPY"}
    assert set(PRODUCT_DIRS) <= copied


def test_package_base_entrypoint_is_the_agent() -> None:
    steps = dict(instructions(ROOT / "deploy" / "package-base" / "Dockerfile"))
    entry = json.loads(steps["ENTRYPOINT"])
    assert entry[:2] == ["python", "-m"]
    assert (ROOT / entry[2] / "__main__.py").is_file()
    assert "/opt/noderoll" in steps["ENV"]
    importlib.import_module(f"{entry[2]}.cli")
    # The agent looks where package images put their files.
    from agent.cli import PACKAGE_DIRS

    assert "/noderoll-package" in PACKAGE_DIRS and "/skyhook-package" in PACKAGE_DIRS
