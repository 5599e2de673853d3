"""`helm template` output of every CI values file passes `kubectl apply --dry-run=server` on the test bed.

The real kube-apiserver (1.20 on the test bed) validates every object: schemas, RBAC rules, CRDs,
the PodDisruptionBudget API version the chart picks for that server version. Namespaced objects need
their namespace to exist, so the test creates a unique release namespace for real and deletes it
afterwards (the package namespace, `noderoll-system`, is a contract name the local stack creates). Kinds the test bed does not serve (the Prometheus Operator's
ServiceMonitor, cert-manager's Certificate and Issuer) are left out of the dry run and named in the
test's output.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.helpers.helm import CI_VALUES, INSTALL_HINT, Render, find_binary, render

HELM = find_binary("helm")
KUBECTL = find_binary("kubectl")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(HELM is None, reason=f"helm is not installed: {INSTALL_HINT}"),
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]


def served_groups(api: client.ApiClient) -> set[str]:
    groups = client.ApisApi(api).get_api_versions().groups
    return {"v1"} | {v.group_version for g in groups for v in g.versions}


@pytest.fixture
def release_namespace(kube_api_client: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(kube_api_client)
    name = f"helm-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_rendered_chart_passes_server_side_dry_run(
    local_stack: Any, kube_api_client: client.ApiClient, release_namespace: str, values: Path,
    tmp_path: Path,
) -> None:
    assert HELM is not None and KUBECTL is not None
    server = client.VersionApi(kube_api_client).get_code().git_version.lstrip("v").split("-")[0]
    objects = render(HELM, Render(values=values, release=f"nr-{release_namespace[-8:]}",
                                  namespace=release_namespace, kube_version=server))
    served = served_groups(kube_api_client)
    unserved = [o for o in objects if o["apiVersion"] not in served]
    checked = [o for o in objects if o["apiVersion"] in served]
    assert {o["kind"] for o in unserved} <= {"ServiceMonitor", "Certificate", "Issuer"}, unserved
    if unserved:
        print(f"not served by the test bed, validated by rendering only: {[o['kind'] for o in unserved]}")

    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(checked, sort_keys=False))
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", local_stack.kubeconfig, "apply", "--dry-run=server", "-f", str(manifest)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(lines) == len(checked), result.stdout
    kinds = {o["kind"] for o in checked}
    assert {"Deployment", "ClusterRole", "Role", "ServiceAccount"} <= kinds
