"""The admission decision (api/admission.py), the AdmissionReview wire format (webhook/review.py), the
HTTPS server over a real TLS socket, and `noderoll webhook` importing no workflow code."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from api.admission import CREATE, UPDATE, AdmissionInput, decide
from localstack.pki import ensure_pki
from tests.helpers.packages import example_image
from webhook.review import ReviewError, parse_review, response
from webhook.server import ServerOptions, WebhookServer


def pkg(name: str, version: str = "1.0.0", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "noderoll.io/v1alpha1", "kind": "Package", "metadata": {"name": name},
            "spec": {"version": version, "image": example_image(name, version), **spec}}


def stored(*objs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs}


def test_own_problems_refuse_with_the_validate_wording() -> None:
    decision = decide(AdmissionInput(CREATE, pkg("svc", interrupt={"type": "service"}), packages={}))
    assert not decision.allowed
    assert decision.message == ("Package/svc: spec.interrupt: type service needs a non-empty services list "
                                "(systemd units, e.g. containerd)")


def test_missing_references_are_admitted_existing_conflicts_refused() -> None:
    missing = pkg("app", dependsOn={"base": "1.0.0"}, deploymentPolicy="later")
    assert decide(AdmissionInput(CREATE, missing, packages={})).allowed
    other_version = decide(AdmissionInput(CREATE, missing, packages=stored(pkg("base", "2.0.0"))))
    assert other_version.message == ("Package/app: spec.dependsOn.base: needs base 1.0.0, but Package base has "
                                     "version 2.0.0; depend on 2.0.0")


def test_a_cycle_closed_by_this_object_is_refused_one_it_is_not_part_of_is_not() -> None:
    existing = stored(pkg("a", dependsOn={"b": "1.0.0"}), pkg("b", dependsOn={"c": "1.0.0"}))
    closing = decide(AdmissionInput(CREATE, pkg("c", dependsOn={"a": "1.0.0"}), packages=existing))
    assert closing.message == ("Package/c: spec.dependsOn: dependency cycle a -> b -> c -> a; "
                               "remove one of these dependsOn entries")
    loop = stored(pkg("x", dependsOn={"y": "1.0.0"}), pkg("y", dependsOn={"x": "1.0.0"}))
    assert decide(AdmissionInput(CREATE, pkg("z", dependsOn={"x": "1.0.0"}), packages=loop)).allowed


def test_an_update_replaces_the_stored_self_and_metadata_only_updates_pass() -> None:
    old = pkg("a", dependsOn={"b": "1.0.0"})
    existing = stored(old, pkg("b", "2.0.0"))
    relabelled = {**old, "metadata": {"name": "a", "labels": {"team": "gpu"}}}
    assert decide(AdmissionInput(UPDATE, relabelled, old, existing)).allowed
    deleting = {**old, "metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": []}}
    assert decide(AdmissionInput(UPDATE, deleting, old, existing)).allowed
    bumped = pkg("a", "1.1.0", dependsOn={"b": "1.0.0"})
    assert not decide(AdmissionInput(UPDATE, bumped, old, existing)).allowed
    assert decide(AdmissionInput(UPDATE, pkg("a", "1.1.0", dependsOn={"b": "2.0.0"}), old, existing)).allowed


def test_unreadable_packages_leave_own_checks_and_warn() -> None:
    decision = decide(AdmissionInput(CREATE, pkg("a", dependsOn={"b": "9.0.0"}), packages=None, unread_reason="503"))
    assert decision.allowed and "could not read the existing Packages (503)" in decision.warnings[0]
    assert not decide(AdmissionInput(CREATE, pkg("A"), packages=None)).allowed


def test_other_groups_and_valid_policies_pass() -> None:
    assert decide(AdmissionInput(CREATE, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})).allowed
    policy = {"apiVersion": "noderoll.io/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": "p"},
              "spec": {"default": {"budget": {"count": 1}}}}
    assert decide(AdmissionInput(CREATE, policy)).allowed


def review(api_version: str, obj: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "noderoll.io", "version": "v1alpha1", "kind": "Package"},
        "name": "svc", "operation": operation, "object": obj, "oldObject": old}}


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_response_is_in_the_request_version_with_causes(api_version: str) -> None:
    parsed = parse_review(review(api_version, pkg("svc", interrupt={"type": "service"})))
    answer = response(parsed, decide(AdmissionInput(parsed.operation, parsed.obj, parsed.old, {})))
    assert answer["apiVersion"] == api_version and answer["kind"] == "AdmissionReview"
    body = answer["response"]
    assert body["uid"] == "u-1" and body["allowed"] is False
    assert body["status"]["code"] == 422 and body["status"]["reason"] == "Invalid"
    assert body["status"]["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "spec.interrupt",
        "message": "type service needs a non-empty services list (systemd units, e.g. containerd)"}]


@pytest.mark.parametrize("body", [
    {}, [], {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v2", "request": {"uid": "x"}},
    {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}},
])
def test_malformed_reviews_are_refused(body: Any) -> None:
    with pytest.raises(ReviewError):
        parse_review(body)


class StoredPackages:
    """A fixed set of stored Packages in place of the API reader (the real one: tests/integration)."""

    def __init__(self, packages: Mapping[str, Mapping[str, Any]]) -> None:
        self.stored = packages

    def packages(self) -> tuple[Mapping[str, Mapping[str, Any]] | None, str]:
        return self.stored, ""

    def close(self) -> None:
        return None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, ssl.SSLContext]]:
    pki = ensure_pki(tmp_path / "pki")
    options = ServerOptions("127.0.0.1", 0, pki.webhook_cert, pki.webhook_key)
    srv = WebhookServer(options, StoredPackages(stored(pkg("base", "2.0.0"))))  # type: ignore[arg-type]
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{srv.server_address[1]}", ssl.create_default_context(cafile=str(pki.ca_cert))
    finally:
        srv.shutdown()
        srv.server_close()


def post(url: str, context: ssl.SSLContext, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_server_answers_over_tls_verified_by_the_ca(server: tuple[str, ssl.SSLContext]) -> None:
    url, context = server
    with urllib.request.urlopen(f"{url}/healthz", context=context, timeout=10) as answer:
        assert answer.read() == b"ok\n"
    status, body = post(f"{url}/validate", context,
                        json.dumps(review("admission.k8s.io/v1", pkg("app", dependsOn={"base": "1.0.0"}))).encode())
    assert status == 200
    assert "has version 2.0.0; depend on 2.0.0" in json.loads(body)["response"]["status"]["message"]
    assert post(f"{url}/validate", context, b"{not json")[0] == 400
    assert post(f"{url}/other", context, b"{}")[0] == 404


def test_the_webhook_command_imports_no_workflow_code() -> None:
    code = ("import sys; from cli import main; main.build_parser(main.modules_for(['webhook', '--port', '1'])); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'workflows', 'activities', 'crd_bridge', 'temporalio', 'fleetsim', 'bench'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
    assert "--tls-cert TLS_CERT" in subprocess.run([sys.executable, "-m", "cli", "webhook", "--help"],
                                                   capture_output=True, text=True, timeout=60).stdout
