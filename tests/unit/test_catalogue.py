"""Every catalogue document is refused by noderoll's models with its expected message.

The apiserver side (schema-level documents refused by the real kube-apiserver, semantic ones
accepted there) is tests/integration/test_crd_catalogue.py.
"""

from __future__ import annotations

import argparse
import re

import pytest

from api import validate_command
from api.validation import validate_documents
from tests.catalogue import Entry, load

ENTRIES = load()


def test_catalogue_is_large_enough() -> None:
    assert len(ENTRIES) >= 25
    assert {e.level for e in ENTRIES} == {"schema", "semantic"}
    assert all(e.expect_apiserver for e in ENTRIES if e.level == "schema")


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_models_refuse_with_expected_message(entry: Entry) -> None:
    result = validate_documents(entry.documents)
    lines = [f"{p.field}: {p.message}" for p in result.problems]
    assert any(entry.expect_model in line for line in lines), lines


@pytest.mark.parametrize("entry", ENTRIES[:3] + ENTRIES[-3:], ids=lambda e: e.id)
def test_validate_command_prints_file_kind_name_field_message(
    entry: Entry, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    validate_command.register(parser.add_subparsers())
    args = parser.parse_args(["validate", "--quiet", str(entry.path)])
    assert args.func(args) == 1
    out = capsys.readouterr().out.splitlines()
    field, _, message = entry.expect_model.partition(": ")
    assert any(
        re.match(rf"{re.escape(str(entry.path))}:\d+: ", line) and f": {field}: " in line and message in line
        for line in out
    ), out
