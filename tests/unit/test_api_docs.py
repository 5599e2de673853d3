"""docs/api.md is generated from the CRD schemas and must be up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_api_doc_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "scripts" / "gen_api_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "api.md").read_text() == module.render(), "run: python scripts/gen_api_docs.py"


def test_api_doc_lists_every_spec_field() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    for field in (
        "spec.version",
        "spec.drain.timeoutSeconds",
        "spec.default.strategy.safetyLimit",
        "spec.canary.promotion",
    ):
        assert f"| `{field}` |" in text
