"""Bad input to `noderoll validate` (V01-V15 in docs/reliability.md; issue #12, item 7), run as a user runs it.

Each case writes a file and runs the installed `noderoll validate` in a subprocess: one clear line
naming the file (and the document's line) on stdout, no traceback, the summary on stderr, and the
documented exit code. No stack is needed (the module's `system` fixture is not used).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.timeout(120)
NODEROLL = str(Path(sys.executable).parent / "noderoll")


def package(**spec: object) -> str:
    doc = {"apiVersion": "noderoll.io/v1alpha1", "kind": "Package", "metadata": {"name": "gpu-tuning"},
           "spec": {"version": "1.0.0", "image": "registry.example/gpu-tuning:1.0.0"} | spec}
    return yaml.safe_dump(doc, sort_keys=False, width=2**31)


VALID = package()


@dataclass(frozen=True)
class Case:
    """A file given to `noderoll validate` and what the user must see."""

    id: str
    content: bytes | None  # None: the path is made by the case (a directory, nothing)
    code: int
    stdout: str  # the one line printed, `<F>` standing for the file's name; a prefix of it for V07
    stderr: str = ""  # a line expected on stderr besides the summary


CASES = [
    Case("V01-binary-file", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00", 2,
         "<F>: not a YAML text file: binary content (a NUL byte at offset 7)"),
    Case("V02-api-group-typo", VALID.replace("noderoll.io", "noderol.io").encode(), 1,
         "<F>:1: Package/gpu-tuning: apiVersion: 'noderol.io/v1alpha1' is not noderoll.io (a typo of noderoll's API "
         "group?); use apiVersion: noderoll.io/v1alpha1"),
    Case("V03-api-version-not-served", VALID.replace("v1alpha1", "v1").encode(), 1,
         "<F>:1: Package/gpu-tuning: apiVersion: apiVersion 'noderoll.io/v1' kind 'Package' is not served; use "
         "apiVersion noderoll.io/v1alpha1 with kind Package or DeploymentPolicy"),
    Case("V04-other-api-group-skipped",
         (VALID + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n").encode(), 0, "",
         "<F>:9: skipped ConfigMap/settings (apiVersion v1: not noderoll.io)"),
    Case("V05-duplicated-key", (VALID + "  version: 2.0.0\n").encode(), 1,
         "<F>:6: Package/gpu-tuning: spec.version: given twice (lines 6 and 8); YAML keeps only the last silently: "
         "remove one"),
    Case("V06-config-of-10-mb", package(config={"small.conf": "x", "blob.bin": "x" * 10_000_000}).encode(), 1,
         "<F>:8: Package/gpu-tuning: spec.config: totals 10000001 bytes (9.5 MiB), more than the 1048576 bytes (1 MiB) "
         "a ConfigMap can hold (the stage pods get the config as one ConfigMap); the largest key is blob.bin "
         "(10000000 bytes): ship large files in the package image instead"),
    Case("V07-yaml-syntax-error", (VALID + "  config: {a.conf: [\n").encode(), 2,
         "<F>:9: YAML syntax error, column 1: did not find expected node content (while parsing a flow node"),
    Case("V08-unquoted-version-1.10", VALID.replace("1.0.0\n", "1.10\n", 1).encode(), 1,
         '<F>:6: Package/gpu-tuning: spec.version: is the number 1.1, not a string (YAML reads the unquoted 1.10 as '
         '1.1); quote it: version: "1.10"'),
    Case("V09-unquoted-depends-on-version", (VALID + "  dependsOn:\n    base: 2.0\n").encode(), 1,
         '<F>:9: Package/gpu-tuning: spec.dependsOn.base: is the number 2.0, not a string; quote it: base: "2.0"'),
    Case("V10-empty-file", b"", 0, "", "<F>: no YAML documents (empty)"),
    Case("V11-a-directory", None, 2, "<F>: is a directory; give the YAML files in it (for example <F>/*.yaml)"),
    Case("V12-a-missing-path", None, 2, "<F>: cannot read: No such file or directory"),
    Case("V13-stdin", VALID.replace("noderoll.io", "noderoll.com").encode(), 1,
         "<stdin>:1: Package/gpu-tuning: apiVersion: 'noderoll.com/v1alpha1' is not noderoll.io (a typo of "
         "noderoll's API group?); use apiVersion: noderoll.io/v1alpha1"),
    Case("V14-a-list-at-top-level", b"- apiVersion: noderoll.io/v1alpha1\n  kind: Package\n", 1,
         "<F>:1: document 1: is a list, not a Kubernetes object (a mapping with apiVersion, kind and metadata)"),
    Case("V15-a-document-that-is-a-string", b"apiVersion noderoll.io/v1alpha1\n", 1,
         "<F>:1: document 1: is a str ('apiVersion noderoll.io/v1alpha1'), not a Kubernetes object (a mapping with "
         "apiVersion, kind and metadata)"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_validate_bad_input(tmp_path: Path, case: Case) -> None:
    path = tmp_path / ("dir" if case.id == "V11-a-directory" else f"{case.id}.yaml")
    stdin = None
    if case.id == "V11-a-directory":
        path.mkdir()
    elif case.id == "V13-stdin":
        stdin, path = case.content, Path("-")
    elif case.content is not None:
        path.write_bytes(case.content)
    result = subprocess.run([NODEROLL, "validate", str(path)], input=stdin, capture_output=True, timeout=100,
                            check=False)
    out, err = result.stdout.decode(), result.stderr.decode()
    assert "Traceback" not in out + err, err
    expected = [case.stdout.replace("<F>", str(path))] if case.stdout else []
    lines = out.splitlines()
    # One clear line per problem, nothing else on stdout.
    assert len(lines) == len(expected) and all(line.startswith(e) for line, e in zip(lines, expected, strict=True)), out
    summary = err.splitlines()[-1]
    assert " document(s) checked: " in summary and summary.endswith(": invalid" if case.code else ": valid"), err
    if case.stderr:
        assert case.stderr.replace("<F>", str(path)) in err.splitlines(), err
    assert result.returncode == case.code, (result.returncode, out, err)
