"""`noderoll validate` on bad input (issue #12, item 7): one clear line per problem, the summary, the exit code.

Also the pure parts it is built from: `api.yaml_source.parse` (bytes -> documents) and
`api.validation.check_document` (one document -> problems), which must never raise.
"""

from __future__ import annotations

import argparse
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from api import validate_command
from api.validation import CONFIGMAP_DATA_LIMIT_BYTES, check_document, near_miss_group
from api.yaml_source import parse

PACKAGE = """\
apiVersion: noderoll.io/v1alpha1
kind: Package
metadata:
  name: a
spec:
  version: 1.0.0
  image: x/a:1.0.0
"""
SUMMARY = re.compile(r"(\d+) document\(s\) checked: (\d+) valid, (\d+) invalid, (\d+) skipped; (\d+) file error\(s\): (\w+)")


def package(name: str = "a", **spec: Any) -> str:
    doc = {"apiVersion": "noderoll.io/v1alpha1", "kind": "Package", "metadata": {"name": name},
           "spec": {"version": "1.0.0", "image": f"x/{name}:1.0.0"} | spec}
    return yaml.safe_dump(doc, sort_keys=False, width=2**31)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    validate_command.register(parser.add_subparsers())
    args = parser.parse_args(["validate", *argv])
    return int(args.func(args))


@pytest.mark.parametrize(
    ("content", "code", "line"),
    [
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 2, "F: not a YAML text file: binary content (a NUL byte",
                     id="binary-file"),
        pytest.param(b"kind: Package\nname: \xff\xfe\n", 2, "F: not a YAML text file: binary content (byte 0xff",
                     id="not-utf8"),
        pytest.param(PACKAGE.replace("noderoll.io", "noderol.io").encode(), 1,
                     "F:1: Package/a: apiVersion: 'noderol.io/v1alpha1' is not noderoll.io (a typo", id="group-typo"),
        pytest.param(PACKAGE.replace("noderoll.io", "noderoll.com").encode(), 1,
                     "F:1: Package/a: apiVersion: 'noderoll.com/v1alpha1' is not noderoll.io", id="group-other-tld"),
        pytest.param(PACKAGE.replace("noderoll.io", "NodeRoll.io").encode(), 1,
                     "(API groups are case-sensitive); use apiVersion: noderoll.io/v1alpha1", id="group-wrong-case"),
        pytest.param(PACKAGE.replace("v1alpha1", "v1").encode(), 1,
                     "F:1: Package/a: apiVersion: apiVersion 'noderoll.io/v1' kind 'Package' is not served",
                     id="version-not-served"),
        pytest.param(PACKAGE.replace("kind: Package\n", "").replace("noderoll.io/v1alpha1", "noderoll.io/v1alpha1\n"
                     "kind: Packag").encode(), 1, "kind 'Packag' is not served", id="kind-typo"),
        pytest.param(b"kind: Package\nmetadata: {name: a}\n", 1, "F:1: Package/a: apiVersion: missing", id="no-api-version"),
        pytest.param((PACKAGE + "  version: 2.0.0\n").encode(), 1,
                     "F:6: Package/a: spec.version: given twice (lines 6 and 8); YAML keeps only the last", id="duplicate-key"),
        pytest.param(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, name: y}\n", 1,
                     "F:3: ConfigMap/y: metadata.name: given twice", id="duplicate-key-in-a-skipped-document"),
        pytest.param((PACKAGE + "  env:\n  - {name: A, value: '1', value: '2'}\n").encode(), 1,
                     "F:9: Package/a: spec.env[0].value: given twice", id="duplicate-key-in-a-list-item"),
        pytest.param(package(config={"small.conf": "x", "big.conf": "x" * CONFIGMAP_DATA_LIMIT_BYTES}).encode(), 1,
                     "spec.config: totals 1048577 bytes (1.0 MiB), more than the 1048576 bytes (1 MiB) a ConfigMap "
                     "can hold (the stage pods get the config as one ConfigMap); the largest key is big.conf",
                     id="config-too-big"),
        pytest.param(package(config={"big.conf": "x" * 10_000_000}).encode(), 1, "the largest key is big.conf "
                     "(10000000 bytes)", id="config-10-mb"),
        pytest.param(b"apiVersion: noderoll.io/v1alpha1\nkind: Package\nmetadata: {name: a\nspec: [\n", 2,
                     "F:4: YAML syntax error, column 5: did not find expected ',' or '}' (while parsing a flow mapping "
                     "started on line 3)", id="syntax-error"),
        pytest.param(PACKAGE.replace("1.0.0\n", "1.10\n", 1).encode(), 1,
                     'F:6: Package/a: spec.version: is the number 1.1, not a string (YAML reads the unquoted 1.10 as '
                     '1.1); quote it: version: "1.10"', id="unquoted-version-1.10"),
        pytest.param(PACKAGE.replace("1.0.0\n", "2\n", 1).encode(), 1,
                     'F:6: Package/a: spec.version: is the number 2, not a string; quote it: version: "2"',
                     id="unquoted-version-integer"),
        pytest.param((PACKAGE + "  dependsOn:\n    b: 2.0\n").encode(), 1,
                     'F:9: Package/a: spec.dependsOn.b: is the number 2.0, not a string; quote it: b: "2.0"',
                     id="unquoted-depends-on-version"),
        pytest.param(b"- a\n- b\n", 1, "F:1: document 1: is a list, not a Kubernetes object", id="top-level-list"),
        pytest.param(b"---\njust a string\n", 1, "F:2: document 1: is a str ('just a string'), not a Kubernetes object",
                     id="document-is-a-string"),
        pytest.param(PACKAGE.replace("metadata:\n  name: a\n", "metadata: oops\n").encode(), 1,
                     "Package/<unnamed>: metadata: Input should be a valid dictionary", id="metadata-not-a-mapping"),
    ],
)
def test_each_bad_input_gets_one_clear_line_and_a_non_zero_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, code: int, line: str,
) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(content)
    assert run_cli([str(path)]) == code
    out, err = capsys.readouterr()
    expected = line.replace("F", str(path), 1) if line.startswith("F") else line
    assert any(expected in printed for printed in out.splitlines()), out
    assert "Traceback" not in out + err
    summary = SUMMARY.search(err)
    assert summary is not None and summary.group(6) == "invalid", err


def test_other_api_groups_are_listed_as_skipped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "gitops.yaml"
    others = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}},
              {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
              {"apiVersion": "pkg.crossplane.io/v1", "kind": "Package", "metadata": {"name": "xp"}},
              {"replicaCount": 2}]
    text = package() + "---\n" + yaml.safe_dump_all(others)
    path.write_text(text)
    assert run_cli([str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    starts = [n + 2 for n, line in enumerate(text.splitlines()) if line == "---"]  # each document's first line
    assert err[:4] == [
        f"{path}:{starts[0]}: skipped ConfigMap/settings (apiVersion v1: not noderoll.io)",
        f"{path}:{starts[1]}: skipped Deployment/web (apiVersion apps/v1: not noderoll.io)",
        f"{path}:{starts[2]}: skipped Package/xp (apiVersion pkg.crossplane.io/v1: not noderoll.io)",
        f"{path}:{starts[3]}: skipped <no kind>/<unnamed> (apiVersion missing: not noderoll.io)",
    ]
    assert err[-1] == "5 document(s) checked: 1 valid, 0 invalid, 4 skipped; 0 file error(s): valid"


def test_summary_counts_a_syntax_error_after_valid_documents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(package("a") + "---\n" + package("b", version="1.10"))
    bad.write_text(package("c") + "---\nkey: [unclosed\n")
    assert run_cli([str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert f"{bad}:10: YAML syntax error" in out and "Package/b: spec.version" not in out
    # c, before the error, is still checked; the file error makes the verdict invalid.
    assert err.splitlines()[-1] == "3 document(s) checked: 3 valid, 0 invalid, 0 skipped; 1 file error(s): invalid"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("", "is a directory; give the YAML files in it (for example P/*.yaml)", id="directory"),
        pytest.param("missing.yaml", "cannot read: No such file or directory", id="missing-file"),
    ],
)
def test_paths_that_are_not_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str) -> None:
    path = tmp_path / name if name else tmp_path
    assert run_cli([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{path}: {message.replace('P', str(path))}"]
    assert err.splitlines()[-1].endswith("1 file error(s): invalid")


@pytest.mark.parametrize(
    "content",
    [pytest.param(b"", id="empty"), pytest.param(b"# only a comment\n", id="comment-only"),
     pytest.param(b"---\n---\n", id="empty-documents")],
)
def test_files_without_documents_are_noted_not_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
) -> None:
    path = tmp_path / "empty.yaml"
    path.write_bytes(content)
    assert run_cli([str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{path}: no YAML documents (empty)",
                   "0 document(s) checked: 0 valid, 0 invalid, 0 skipped; 0 file error(s): valid"]


def test_stdin_and_utf16(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(PACKAGE.replace("1.0.0\n", "1.10\n", 1).encode()))
    monkeypatch.setattr("sys.stdin", stdin)
    assert run_cli(["-"]) == 1
    assert '<stdin>:6: Package/a: spec.version: is the number 1.1' in capsys.readouterr().out
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes(PACKAGE.encode("utf-16"))
    assert run_cli([str(utf16)]) == 0


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text("apiVersion: noderoll.io/v1alpha1\nkind: Package\nmetadata: {name: a}\nspec:\n"
                    "  <<: {version: 0.0.1, image: x/a:1}\n  version: 1.0.0\n")
    assert run_cli([str(path)]) == 0


def test_quiet_prints_problems_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(package() + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert run_cli(["--quiet", str(path)]) == 0
    assert capsys.readouterr() == ("", "")


# ---- the pure parts -------------------------------------------------------------------------


def test_check_document_on_json_objects_for_an_admission_webhook() -> None:
    doc = json.loads(json.dumps(yaml.safe_load(package(version="1.0.0"))))
    doc["spec"]["version"] = 1.1
    check = check_document(doc)
    assert [(p.field, p.message) for p in check.problems] == [
        ("spec.version", 'is the number 1.1, not a string; quote it: version: "1.1"')]
    assert check_document({"apiVersion": "v1", "kind": "Secret"}).skipped


@pytest.mark.parametrize(
    ("api_version", "near"),
    [
        pytest.param("noderol.io/v1alpha1", True, id="missing-letter"),
        pytest.param("noderolll.io/v1alpha1", True, id="extra-letter"),
        pytest.param("nodreoll.io/v1alpha1", True, id="swapped-letters"),
        pytest.param("noderoll.com/v1alpha1", True, id="other-tld"),
        pytest.param("noderoll.example.com/v1", True, id="own-domain"),
        pytest.param("NODEROLL.IO/v1alpha1", True, id="upper-case"),
        pytest.param("noderoll.io/v1", False, id="our-group-other-version"),
        pytest.param("v1", False, id="core"),
        pytest.param("node.k8s.io/v1", False, id="node-k8s-io"),
        pytest.param("skyhook.nvidia.com/v1alpha1", False, id="nodewright"),
        pytest.param("networking.k8s.io/v1", False, id="networking"),
        pytest.param("monitoring.coreos.com/v1", False, id="prometheus-operator"),
        pytest.param("upgrade.cattle.io/v1", False, id="system-upgrade-controller"),
        pytest.param("argoproj.io/v1alpha1", False, id="argo"),
    ],
)
def test_near_misses_of_the_api_group(api_version: str, near: bool) -> None:
    assert near_miss_group(api_version) is near


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["apiVersion", "kind", "metadata", "spec", "name", "version", "config", "dependsOn", "x"]),
        children, max_size=5),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(JSON, st.sampled_from(["noderoll.io/v1alpha1", "noderol.io/v1", "v1", None]),
       st.sampled_from(["Package", "DeploymentPolicy", None]))
def test_check_document_never_raises(body: Any, api_version: str | None, kind: str | None) -> None:
    doc = body
    if isinstance(body, dict):
        doc = dict(body) | {k: v for k, v in (("apiVersion", api_version), ("kind", kind)) if v is not None}
    check = check_document(doc)
    assert check.skipped or check.problems or check.model is not None


YAML_PIECES = ["apiVersion: noderoll.io/v1alpha1\n", "kind: Package\n", "metadata: ", "spec:\n", "  version: ",
               "name: a\n", "- ", "{", "}", "[", "]", ", ", "&a ", "*a ", "<<: ", "\n", "  ", "1.10", "'", '"', "---\n",
               "!!binary ", "!!python/object ", "? ", ": ", "# c\n", "\t", "\x00", "\ufeff", "config: ", "dependsOn: "]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode)
       | st.lists(st.sampled_from(YAML_PIECES), max_size=30).map(lambda parts: "".join(parts).encode()))
def test_parse_never_raises(raw: bytes) -> None:
    parsed = parse(raw)
    for doc in parsed.documents:
        check_document(doc.data, doc.scalars)
