"""The Helm chart's admission webhook: the configuration the local stack registers, a generated
certificate the caBundle trusts for the Service's names, cert-manager instead, and off.

Rendering uses the real helm binary (scripts/install-helm); skipped, saying why, when it is missing.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
from cryptography import x509

from localstack.cluster import webhook_configuration
from tests.helpers.helm import CHART, INSTALL_HINT, Render, find_binary, render

HELM = find_binary("helm")
pytestmark = pytest.mark.skipif(HELM is None, reason=f"helm is not installed: {INSTALL_HINT}")
CERT_MANAGER = CHART / "ci" / "certmanager-values.yaml"


def objects_of(spec: Render) -> list[dict[str, Any]]:
    assert HELM is not None
    return render(HELM, spec)


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and "webhook" in o["metadata"]["name"] + o["kind"].lower()]
    assert len(found) == 1, (kind, [o["metadata"]["name"] for o in found])
    return found[0]


def test_configuration_matches_the_local_stacks() -> None:
    chart = one(objects_of(Render()), "ValidatingWebhookConfiguration")["webhooks"][0]
    local = webhook_configuration("https://127.0.0.1:9443", b"ca")["webhooks"][0]
    for key in ("name", "rules", "failurePolicy", "matchPolicy", "sideEffects", "timeoutSeconds",
                "admissionReviewVersions"):
        assert chart[key] == local[key], key
    assert chart["failurePolicy"] == "Fail"
    assert local["clientConfig"]["url"].endswith(chart["clientConfig"]["service"]["path"])


def test_generated_certificate_is_trusted_by_the_ca_bundle_for_the_service_names() -> None:
    objects = objects_of(Render(namespace="platform"))
    config = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
    secret = one(objects, "Secret")
    assert config["caBundle"] == secret["data"]["ca.crt"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(config["caBundle"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    service = config["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in names and service["namespace"] == "platform"
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=3000)
    # The Deployment mounts that Secret where `noderoll webhook` reads it by default.
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == secret["metadata"]["name"]
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/etc/noderoll/webhook-tls"
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert one(objects, "Service")["spec"]["ports"][0]["port"] == service["port"] == 443


def test_cert_manager_replaces_the_generated_secret() -> None:
    objects = objects_of(Render(values=CERT_MANAGER))
    assert not [o for o in objects if o["kind"] == "Secret"]
    certificate = one(objects, "Certificate")
    assert certificate["spec"]["issuerRef"] == {"name": "platform-ca", "kind": "ClusterIssuer"}
    configuration = one(objects, "ValidatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"noderoll/{certificate['metadata']['name']}")
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]
    self_signed = objects_of(Render(sets={"webhook.certManager.enabled": "true"}))
    assert one(self_signed, "Issuer")["spec"] == {"selfSigned": {}}


def test_two_replicas_have_a_pdb_and_disabled_renders_nothing() -> None:
    objects = objects_of(Render())
    assert one(objects, "Deployment")["spec"]["replicas"] == 2
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    off = objects_of(Render(sets={"webhook.enabled": "false"}))
    assert not [o for o in off if "webhook" in o["metadata"]["name"] or o["kind"] == "ValidatingWebhookConfiguration"]
