"""tests/helpers/doc_commands.py: which lines of a fenced block are commands, and which act on a rollout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.doc_commands import acts_on_rollout, blocks, commands, doc_test_commands, unmarked

VERBS = {"status", "pause", "resume", "halt", "retry", "nodes", "logs", "node", "rerun", "version"}
DOC = """# A doc

```sh doc-test
noderoll status                # a comment
# a comment line
$ kubectl get packages
helm install x y \\
  --set a=b
```

* a list item:

  ```text illustrative
  kubectl get dp gpu-fleet -o wide
    output line, indented
  ```

```yaml
kind: Package
```

```
temporal workflow signal --workflow-id fleet/p --name pause
```
"""


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(DOC)
    return path


def test_blocks_commands_and_markers(doc: Path) -> None:
    found = blocks(doc, doc.parent)
    assert [(b.line, b.language, sorted(b.flags)) for b in found] == [
        (3, "sh", ["doc-test"]), (13, "text", ["illustrative"]), (18, "yaml", []), (22, "", [])]
    first = commands(found[0])
    assert [(c.line, c.text) for c in first] == [
        (4, "noderoll status                # a comment"), (6, "kubectl get packages"),
        (7, "helm install x y --set a=b")]
    # The list item's block: its indentation is the fence's; the indented line is output.
    assert [c.text for c in commands(found[1])] == ["kubectl get dp gpu-fleet -o wide"]
    assert [c.where for c in doc_test_commands([doc], doc.parent)] == ["doc.md:4", "doc.md:6", "doc.md:7"]


def test_an_unmarked_rollout_command_is_reported(doc: Path) -> None:
    assert unmarked([doc], doc.parent, VERBS) == [
        "doc.md:23: temporal workflow signal --workflow-id fleet/p --name pause"]


@pytest.mark.parametrize(("line", "expected"), [
    pytest.param("kubectl get nodes", True, id="kubectl"),
    pytest.param("temporal workflow list --query x", True, id="temporal-workflow"),
    pytest.param("temporal operator search-attribute create --name X", False, id="temporal-operator"),
    pytest.param("noderoll pause pkg && noderoll status pkg", True, id="noderoll-verb"),
    pytest.param("scripts/noderoll status", True, id="wrapper-verb"),
    pytest.param(".venv/bin/noderoll node reset n1", True, id="venv-node-verb"),
    pytest.param("scripts/noderoll demo --keep", False, id="demo"),
    pytest.param("noderoll validate deploy/*.yaml", False, id="validate"),
    pytest.param("noderoll import - -o out/", False, id="import"),
    pytest.param("cat x.yaml | noderoll import -", False, id="pipe-import"),
    pytest.param("kubectl get skyhooks -o yaml | noderoll import -", True, id="pipe-kubectl"),
    pytest.param("KUBECONFIG=k noderoll status", True, id="env-prefix"),
    pytest.param("NODEROLL_ALLOW_SKIPS=1 scripts/test", False, id="scripts-test"),
    pytest.param("kind: Package", False, id="yaml"),
    pytest.param("NoderollPackage = 'x'", False, id="query-text"),
])
def test_acts_on_rollout(line: str, expected: bool) -> None:
    assert acts_on_rollout(line, VERBS) is expected
