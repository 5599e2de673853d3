"""First-run set-up inside the local cluster: noderoll's namespace, its CRDs, service-account tokens.

Runs after the apiserver and controller manager are ready, on every `dev up` (each step is
idempotent). Does I/O (Kubernetes API).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from api.keys import PACKAGE_POD_NAMESPACE
from localstack.provision import REPO_ROOT

CRD_DIR = REPO_ROOT / "deploy" / "crds"
# Namespaces whose `default` service account must have its token before pods can be created there
# (1.20's ServiceAccount admission refuses pods until the token controller has made the secret).
TOKEN_NAMESPACES = ("default", PACKAGE_POD_NAMESPACE)


class ClusterSetupError(RuntimeError):
    """The cluster answered but a set-up step did not complete."""


@dataclass(frozen=True)
class SetupRequest:
    """What `setup_cluster` needs."""

    kubeconfig: Path
    deadline: float  # time.monotonic() value
    crd_dir: Path = CRD_DIR


def _crd_documents(crd_dir: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(crd_dir.glob("*.yaml")) if crd_dir.is_dir() else []:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


def _apply_crd(ext: client.ApiextensionsV1Api, doc: dict[str, Any]) -> None:
    name = doc["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(doc)
    except ApiException as err:
        if err.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": current.metadata.resource_version}}
        ext.replace_custom_resource_definition(name, body)


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    crd = ext.read_custom_resource_definition(name)
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _has_token(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        account = core.read_namespaced_service_account("default", namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return bool(account.secrets)


def _poll(check: Any, deadline: float, what: str) -> None:
    while not check():
        if time.monotonic() > deadline:
            raise ClusterSetupError(f"timed out waiting for {what}")
        time.sleep(0.25)


def setup_cluster(request: SetupRequest) -> list[str]:
    """Create the package-pod namespace, apply the CRDs, wait for SA tokens; return the CRD names."""
    api = config.new_client_from_config(config_file=str(request.kubeconfig))
    try:
        core = client.CoreV1Api(api)
        try:
            core.create_namespace({"metadata": {"name": PACKAGE_POD_NAMESPACE}})
        except ApiException as err:
            if err.status != 409:
                raise
        ext = client.ApiextensionsV1Api(api)
        names = []
        for doc in _crd_documents(request.crd_dir):
            _apply_crd(ext, doc)
            names.append(doc["metadata"]["name"])
        for name in names:
            _poll(lambda n=name: _established(ext, n), request.deadline, f"CRD {name} to be Established")
        for namespace in TOKEN_NAMESPACES:
            _poll(lambda ns=namespace: _has_token(core, ns), request.deadline,
                  f"the token of service account default/{namespace} (token controller)")
        return names
    except ApiException as err:
        raise ClusterSetupError(f"Kubernetes API error during set-up: {err.status} {err.reason}") from err
    finally:
        api.close()
