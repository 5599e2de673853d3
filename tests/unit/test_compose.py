"""The container tier is coherent: docker-compose.yml, the Dockerfiles and the k3s test (no Docker engine needed).

No Docker engine runs on the test bed, so neither `docker compose up` nor tests/docker has run there;
this module checks statically what can be checked. It parses the compose file and the Dockerfiles,
and checks them against the code: the commands the containers run are real `noderoll` sub-commands
with valid flags; the environment of each service is what that command reads (recorded while the
code builds its parser and resolves its settings, not retyped), the worker's includes the agent
image of its stage pods; build contexts, Dockerfiles and copied paths exist and entry points name
real modules; the search attributes that compose and the k3s test register are the contract's
(`protocol.names`); images have one name each across compose, the Dockerfiles, the Helm values,
the worker's default and the k3s test; and compose's documented quick start (its header, repeated
in docs/operations.md) applies a DeploymentPolicy and a Package built FROM the agent image it builds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from activities.stage_pod import DEFAULT_AGENT_IMAGE
from cli.main import build_parser
from localstack.rootfs import source_packages
from protocol.names import SEARCH_ATTRIBUTE_TYPES
from service.connection import settings_from_args
from service.temporal_client import tls_from_env
from worker.run_worker import stage_pod_settings

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


# The command module each noderoll service of compose runs (cli.main.COMMAND_MODULES).
SERVICE_MODULES = {"worker": "worker.run_worker", "bridge": "crd_bridge.command"}
HELM_VALUES = ROOT / "deploy" / "helm" / "noderoll" / "values.yaml"
K3S_TEST = ROOT / "tests" / "docker" / "test_k3s_rollout.py"
OPERATIONS = ROOT / "docs" / "operations.md"


class RecordingEnviron(dict[str, str]):
    """`os.environ` stand-in that records every variable the code looks up."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def interpolated(value: str) -> str:
    """A compose value with `${NAME:-default}` replaced by its default (the user sets nothing)."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))


def run_in_environment(service: str, env: dict[str, str]) -> tuple[set[str], Any, argparse.Namespace]:
    """Build and parse the service's command in `env` as its only environment; what it read, its settings, args."""
    environ = RecordingEnviron(env)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", environ)
        parser = build_parser((SERVICE_MODULES[service],))
        args = parser.parse_args([service])
        settings = settings_from_args(args, service)
        tls_from_env()
        if service == "worker":
            stage_pod_settings(args)
    return environ.read, settings, args


def quick_start_commands() -> list[str]:
    """The quick start in docker-compose.yml's header: the indented command lines, in order."""
    return [line.removeprefix("#   ").split("  #")[0].strip() for line in COMPOSE.read_text().splitlines()
            if line.startswith("#   ") and line[4:5].isalpha()]


def repository(image: str) -> str:
    """`registry/name` of an image reference (tag and digest dropped)."""
    name = image.split("@", 1)[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def build_tags(command: str) -> tuple[str, str]:
    """(the -f Dockerfile, the -t image) of a `docker build` command line."""
    argv = shlex.split(command)
    return argv[argv.index("-f") + 1], argv[argv.index("-t") + 1]


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
    env = {name: interpolated(value) for name, value in spec["environment"].items()}
    read, settings, _ = run_in_environment(service, env)
    assert set(env) <= read, f"noderoll {service} does not read {sorted(set(env) - read)}"
    # And what it reads is what compose means: Temporal in the compose network, the mounted kubeconfig.
    assert (settings.temporal_address, settings.namespace, settings.task_queue, settings.kubeconfig) == (
        env["NODEROLL_TEMPORAL_ADDRESS"], env["NODEROLL_TEMPORAL_NAMESPACE"], env["NODEROLL_TASK_QUEUE"],
        env["KUBECONFIG"])
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


def test_the_worker_pins_the_agent_image_of_its_stage_pods(compose: dict[str, Any]) -> None:
    worker = {name: interpolated(value) for name, value in compose["services"]["worker"]["environment"].items()}
    _, _, args = run_in_environment("worker", worker)
    # The name the worker reads (`--agent-image`'s variable), set to the agent image of this release.
    assert stage_pod_settings(args).agent_image == worker["NODEROLL_AGENT_IMAGE"] == DEFAULT_AGENT_IMAGE
    # The bridge starts no stage pods: it must not be given (or read) the setting.
    bridge = {name: interpolated(value) for name, value in compose["services"]["bridge"]["environment"].items()}
    read, _, _ = run_in_environment("bridge", {**bridge, "NODEROLL_AGENT_IMAGE": "x"})
    assert "NODEROLL_AGENT_IMAGE" not in bridge and "NODEROLL_AGENT_IMAGE" not in read


def test_the_k3s_tier_registers_the_contract_search_attributes() -> None:
    from tests.docker.test_k3s_rollout import temporal_command

    registered = dict(re.findall(r"--search-attribute (Noderoll\w+)=(\w+)", temporal_command()))
    assert registered == SEARCH_ATTRIBUTE_TYPES
    # Taken from protocol.names, not retyped (a retyped `Keyword` once stood where the contract says KeywordList).
    assert not re.search(r"Noderoll\w+=\w+|\"(Keyword|KeywordList)\"", K3S_TEST.read_text())


def test_the_k3s_tier_builds_the_agent_image_and_gives_it_to_the_worker() -> None:
    from tests.docker import test_k3s_rollout as k3s

    agent = k3s.agent_image("t1")
    assert repository(agent) == repository(DEFAULT_AGENT_IMAGE) and agent != DEFAULT_AGENT_IMAGE
    env = k3s.worker_env("temporal:7233", "/kubeconfig", "q", agent)
    read, _, args = run_in_environment("worker", {k: v for k, v in env.items() if k.startswith("NODEROLL_")
                                                  or k == "KUBECONFIG"})
    assert stage_pod_settings(args).agent_image == agent
    # Built from the agent's Dockerfile, and the package FROM it.
    assert json.loads(dict(instructions(ROOT / k3s.AGENT_DOCKERFILE))["ENTRYPOINT"])[:3] == ["python", "-m", "agent"]
    assert "ARG BASE" in (ROOT / k3s.PACKAGE_DOCKERFILE).read_text()


def test_each_image_has_one_name(compose: dict[str, Any]) -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    app_version = yaml.safe_load((HELM_VALUES.parent / "Chart.yaml").read_text())["appVersion"]
    assert version == app_version
    # The worker/bridge image: Helm's repository, built by compose and named in the Dockerfile's header.
    noderoll = values["image"]["repository"]
    assert {repository(compose["services"][s]["image"]) for s in ("worker", "bridge")} == {noderoll}
    header = re.search(r"docker build -t (\S+) \.", (ROOT / "Dockerfile").read_text())
    assert header and repository(header.group(1)) == noderoll
    # The agent image: Helm's stagePods.agentImage, the worker's default, compose, the Dockerfiles' headers.
    agent = values["stagePods"]["agentImage"]["repository"]
    assert DEFAULT_AGENT_IMAGE == f"{agent}:{version}"
    assert interpolated(compose["services"]["worker"]["environment"]["NODEROLL_AGENT_IMAGE"]) == DEFAULT_AGENT_IMAGE
    for dockerfile in ("deploy/package-base/Dockerfile", "deploy/package-base/Package.Dockerfile"):
        named = re.findall(r"(?:-t |FROM |BASE=)(\S*/agent\S*)", (ROOT / dockerfile).read_text())
        assert named and {repository(n) for n in named} == {agent}, (dockerfile, named)


def test_the_quick_start_builds_the_agent_and_rolls_out_a_policy_and_a_package(compose: dict[str, Any]) -> None:
    commands = quick_start_commands()
    builds = [build_tags(c) for c in commands if c.startswith("docker build")]
    agent = interpolated(compose["services"]["worker"]["environment"]["NODEROLL_AGENT_IMAGE"])
    assert ("deploy/package-base/Dockerfile", agent) in builds
    package_build = next(c for c in commands if "Package.Dockerfile" in c)
    package_image = build_tags(package_build)[1]
    assert f"BASE={agent}" in package_build
    # Both images reach the nodes (kind), then compose starts, then the CRDs and the namespace.
    assert any(c.startswith("kind load docker-image") and agent in c and package_image in c for c in commands)
    assert commands.index("docker compose up --build -d") < commands.index("kubectl apply -f deploy/crds/")
    applied = [shlex.split(c) for c in commands if c.startswith("kubectl apply -f deploy/examples")]
    files = [argv[i + 1] for argv in applied for i, a in enumerate(argv) if a == "-f"]
    documents = [d for f in files for d in yaml.safe_load_all((ROOT / f).read_text()) if d]
    kinds = {d["kind"]: d for d in documents}
    assert set(kinds) == {"DeploymentPolicy", "Package"}, files
    package = kinds["Package"]
    assert package["spec"]["deploymentPolicy"] == kinds["DeploymentPolicy"]["metadata"]["name"]
    assert package["spec"]["image"] == package_image
    # The nodes the Package selects are labelled, and the command waits for the Package to be Ready.
    (key, value), = package["spec"]["nodeSelector"]["matchLabels"].items()
    assert f"kubectl label nodes --all {key}={value}" in commands
    assert f"kubectl wait --for=condition=Ready package/{package['metadata']['name']} --timeout=15m" in commands


def test_the_documented_quick_start_is_compose_s() -> None:
    text = OPERATIONS.read_text()
    section = text[text.index("## Try it with docker compose"):]
    block = section[section.index("```"):]
    block = block[block.index("\n") + 1:block.index("\n```")]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert lines == quick_start_commands()
