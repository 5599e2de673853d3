"""First-run set-up inside the local cluster: noderoll's namespace, its CRDs, service-account tokens,
and the registration of the admission webhook (`noderoll webhook`, a component of the stack).

Runs after the apiserver and controller manager are ready, on every `dev up` (each step is
idempotent). The ValidatingWebhookConfiguration says what the Helm chart's says
(`deploy/helm/noderoll/templates/webhook.yaml`; a unit test compares them) but calls the webhook by
URL on this machine, trusting the local CA. `up` waits until the apiserver calls it (an invalid
Package in a dry run is refused), so a test or a user applying right after `up` meets it.
Does I/O (Kubernetes API).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from api import keys
from api.keys import PACKAGE_POD_NAMESPACE
from localstack.provision import REPO_ROOT

CRD_DIR = REPO_ROOT / "deploy" / "crds"
# Namespaces whose `default` service account must have its token before pods can be created there
# (1.20's ServiceAccount admission refuses pods until the token controller has made the secret).
TOKEN_NAMESPACES = ("default", PACKAGE_POD_NAMESPACE)
WEBHOOK_CONFIGURATION = "noderoll-local"
WEBHOOK_NAME = "validate.noderoll.io"
WEBHOOK_PATH = "/validate"
# Fail, as in the chart: see docs/operations.md, "The admission webhook".
WEBHOOK_FAILURE_POLICY = "Fail"
WEBHOOK_TIMEOUT_SECONDS = 10


class ClusterSetupError(RuntimeError):
    """The cluster answered but a set-up step did not complete."""


@dataclass(frozen=True)
class SetupRequest:
    """What `setup_cluster` needs (`webhook_url`, `ca_bundle`: register the webhook there)."""

    kubeconfig: Path
    deadline: float  # time.monotonic() value
    crd_dir: Path = CRD_DIR
    webhook_url: str | None = None
    ca_bundle: bytes = b""


def webhook_rules() -> list[dict[str, Any]]:
    """CREATE and UPDATE of both kinds (not their /status: the bridge's status writes never wait on it)."""
    return [{
        "apiGroups": [keys.GROUP], "apiVersions": [keys.VERSION], "operations": ["CREATE", "UPDATE"],
        "resources": [keys.PACKAGE_PLURAL, keys.POLICY_PLURAL], "scope": "Cluster",
    }]


def webhook_configuration(url: str, ca_bundle: bytes) -> dict[str, Any]:
    """The local stack's ValidatingWebhookConfiguration (admissionregistration.k8s.io/v1)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"app.kubernetes.io/name": "noderoll"}},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "clientConfig": {"url": url.rstrip("/") + WEBHOOK_PATH, "caBundle": base64.b64encode(ca_bundle).decode()},
            "rules": webhook_rules(),
            "failurePolicy": WEBHOOK_FAILURE_POLICY,
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": WEBHOOK_TIMEOUT_SECONDS,
            "admissionReviewVersions": ["v1", "v1beta1"],
        }],
    }


def _register_webhook(api: client.ApiClient, body: dict[str, Any]) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    try:
        current = admission.read_validating_webhook_configuration(WEBHOOK_CONFIGURATION)
    except ApiException as err:
        if err.status != 404:
            raise
        admission.create_validating_webhook_configuration(body)
        return
    stored = api.sanitize_for_serialization(current)
    if stored.get("webhooks") and stored["webhooks"][0]["clientConfig"] == body["webhooks"][0]["clientConfig"]:
        return
    body = {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}}
    admission.replace_validating_webhook_configuration(WEBHOOK_CONFIGURATION, body)


def _webhook_answers(api: client.ApiClient) -> bool:
    # A name the apiserver accepts but noderoll's models refuse (44 characters): only the webhook refuses it.
    name = "webhook-probe-" + "x" * 30
    probe = {"apiVersion": keys.API_VERSION, "kind": keys.PACKAGE_KIND, "metadata": {"name": name},
             "spec": {"version": "1.0.0", "image": "example.local/probe:1.0.0"}}
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, probe, dry_run="All")
    except ApiException as err:
        try:
            message = str(json.loads(err.body or "{}").get("message", ""))
        except ValueError:
            message = ""
        return err.status == 422 and WEBHOOK_NAME in message and "denied the request" in message
    return False


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
        if request.webhook_url is not None:
            _register_webhook(api, webhook_configuration(request.webhook_url, request.ca_bundle))
            _poll(lambda: _webhook_answers(api), request.deadline,
                  f"the apiserver to call the admission webhook at {request.webhook_url}")
        return names
    except ApiException as err:
        raise ClusterSetupError(f"Kubernetes API error during set-up: {err.status} {err.reason}") from err
    finally:
        api.close()
