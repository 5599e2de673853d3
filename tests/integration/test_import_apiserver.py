"""`noderoll import` output on the real kube-apiserver of the test bed: every document imported from
tests/fixtures/nodewright is accepted by noderoll's CRDs (`create`, dry run) and stored as written,
with no field pruned (a field the schema did not know would vanish silently)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from api.nodewright_import import import_documents
from api.yaml_source import parse
from tests.integration.test_crd_catalogue import crds, dry_run_create  # noqa: F401  (crds is a fixture)

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nodewright"
SOURCES = sorted(p for p in FIXTURES.glob("*.yaml") if not p.name.endswith(".expected.yaml"))


def kept(sent: Any, stored: Any) -> bool:
    """True when every field of `sent` is in `stored` with the same value (defaults may be added)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(k in stored and kept(v, stored[k]) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(stored, list) and len(sent) == len(stored) and all(map(kept, sent, stored))
    return bool(sent == stored)


def test_imported_documents_are_accepted_by_the_crds(kube_api_client: client.ApiClient, crds: list[str]) -> None:  # noqa: F811
    docs = [d.data for path in SOURCES for d in parse(path.read_bytes()).documents]
    result = import_documents(docs)
    assert len(result.documents) == 10
    for item in result.documents:
        stored = dry_run_create(kube_api_client, item.document)
        assert kept(item.document["spec"], stored["spec"]), (item.document, stored)
