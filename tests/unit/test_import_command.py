"""`noderoll import` as a command (api/import_command.py): output, lines on stderr, exit codes, files.

The fixtures are tests/fixtures/nodewright (NodeWright manifests written here from its docs); the
documents expected are the hand-written `*.expected.yaml` next to them. One test runs the real
commands as processes: `noderoll import -o DIR` on every fixture, then `noderoll validate DIR/*`.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from api import import_command
from api.validation import validate_documents

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nodewright"
SOURCES = sorted(p for p in FIXTURES.glob("*.yaml") if not p.name.endswith(".expected.yaml"))
UNMAPPABLE = FIXTURES / "skyhook-unmappable.yaml"


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    import_command.register(parser.add_subparsers())
    args = parser.parse_args(["import", *argv])
    return int(args.func(args))


def expected(path: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(path.with_name(path.stem + ".expected.yaml").read_text()))


def line_of(path: Path, text: str) -> int:
    """The 1-based line of the first line of `path` containing `text`."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_stdout_holds_the_expected_documents(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli([str(path)])
    out, _ = capsys.readouterr()
    assert list(yaml.safe_load_all(out)) == expected(path)
    assert code == (1 if path == UNMAPPABLE else 0)
    # Each document says where it came from.
    assert out.count(f"# from {path}: ") == len(expected(path))


def test_stderr_names_file_line_object_field_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli([str(UNMAPPABLE)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert (f"{UNMAPPABLE}:{line_of(UNMAPPABLE, 'valueFrom:')}: Skyhook/legacy-tools: "
            "spec.packages.monitoring-agent.env[0].valueFrom: not carried: variable 'API_TOKEN' left out: noderoll's "
            "env takes literal values only; put the secret in config, or read it on the host") in err
    assert (f"{UNMAPPABLE}:{line_of(UNMAPPABLE, 'type: kexec')}: Skyhook/legacy-tools: "
            "spec.packages.crash-dump.interrupt.type: not imported: package crash-dump not imported: 'kexec' is not "
            "an interrupt type; NodeWright's are reboot, service, restartAllServices and noop (guessing one could "
            "reboot nodes, or skip a reboot)") in err
    assert err[-1] == ("1 NodeWright object(s) read: 1 Package(s) and 1 DeploymentPolicy(ies) written; 18 field(s) "
                       "not carried, 2 not imported, 1 note(s); 0 document(s) skipped")
    # One line per field: every line but the summary is file:line: Kind/name: field: severity: why.
    assert all(line.startswith(f"{UNMAPPABLE}:") and ": Skyhook/legacy-tools: " in line for line in err[:-1])


def test_output_dir_writes_one_file_per_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    path = FIXTURES / "skyhook-every-field.yaml"
    assert run_cli(["-o", str(out), str(path)]) == 0
    assert capsys.readouterr().out == ""
    files = sorted(p.name for p in out.iterdir())
    assert files == ["deploymentpolicy-gpu-tuning.yaml", "package-gpu-driver.yaml", "package-kernel-params.yaml"]
    written = {f: yaml.safe_load((out / f).read_text()) for f in files}
    assert sorted(written.values(), key=str) == sorted(expected(path), key=str)
    (out / "package-gpu-driver.yaml").write_text("stale")
    assert run_cli(["-q", "-o", str(out), str(path)]) == 0  # written again: replaced
    assert yaml.safe_load((out / "package-gpu-driver.yaml").read_text())["kind"] == "Package"


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    source = FIXTURES / "nodewright-with-policy.yaml"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    assert run_cli(["-"]) == 0
    out, err = capsys.readouterr()
    assert list(yaml.safe_load_all(out)) == expected(source)
    assert "# from <stdin>: NodeWright/fabric (spec.packages.ib-tuning)" in out


@pytest.mark.parametrize(
    ("content", "argv", "code", "message"),
    [
        pytest.param(b"kind: [unclosed", [], 2, "F:2: YAML syntax error", id="not-yaml"),
        pytest.param(None, [], 2, "F: cannot read", id="missing-file"),
        pytest.param(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", [], 1,
                     "no NodeWright object in the input", id="nothing-to-import"),
        pytest.param((FIXTURES / "kubectl-get-list.yaml").read_bytes(), ["--policy-name", "nope=x"], 2,
                     "noderoll import: --policy-name nope=...: no DeploymentPolicy", id="rename-naming-nothing"),
        pytest.param((FIXTURES / "kubectl-get-list.yaml").read_bytes(), ["--policy-name", "a", "--policy-name", "b"],
                     2, "--policy-name without OLD= given 2 times", id="two-bare-policy-names"),
    ],
)
def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, argv: list[str],
                    code: int, message: str) -> None:
    path = tmp_path / "F"
    if content is not None:
        path.write_bytes(content)
    assert run_cli([*argv, str(path)]) == code
    out, err = capsys.readouterr()
    assert message.replace("F", str(path), 1) in err if message.startswith("F") else message in err
    assert out == ""


def test_policy_name_and_names_options(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "kubectl-get-list.yaml"
    assert run_cli(["-q", "--policy-name", "fleet-a", "--names", "skyhook-package", "--paused", str(path)]) == 0
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    # --quiet: the per-object lines only (the mirrored Skyhook's note), no skipped list, no summary.
    assert err.count("\n") == 1 and ": note: the same object as NodeWright/node-setup" in err
    assert [(d["kind"], d["metadata"]["name"], d["spec"].get("deploymentPolicy")) for d in docs] == [
        ("DeploymentPolicy", "fleet-a", None), ("Package", "node-setup-tuned", "fleet-a")]
    assert docs[1]["spec"]["paused"] is True


def test_yaml_keeps_versions_strings_and_config_readable() -> None:
    doc = {"spec": {"version": "1.10", "config": {"a.sh": "#!/bin/sh\necho hi\n", "b": "x"}}}
    text = import_command.render(doc)
    assert "version: '1.10'" in text and "a.sh: |\n      #!/bin/sh\n      echo hi\n" in text
    assert yaml.safe_load(text) == doc


def test_duplicated_keys_are_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("apiVersion: skyhook.nvidia.com/v1alpha1\nkind: Skyhook\nmetadata: {name: s}\nspec:\n"
                    "  packages:\n    a: {version: 1.0.0, image: x/a, version: 2.0.0}\n")
    assert run_cli([str(path)]) == 0
    out, err = capsys.readouterr()
    assert f"{path}:6: spec.packages.a.version: note: given twice (lines 6 and 6); YAML keeps the last" in err
    assert yaml.safe_load(out)["spec"]["version"] == "2.0.0"


def noderoll(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=120)


def test_import_round_trips_through_noderoll_validate(tmp_path: Path) -> None:
    """The real commands, as processes: import every fixture, then validate what was written."""
    out = tmp_path / "noderoll"
    imported = noderoll("import", "-o", str(out), *map(str, SOURCES))
    assert imported.returncode == 1, imported.stderr  # the unmappable fixture has packages it cannot import
    files = sorted(str(p) for p in out.iterdir())
    assert len(files) == sum(len(expected(p)) for p in SOURCES) == 10
    validated = noderoll("validate", *files)
    assert validated.returncode == 0, validated.stdout
    assert validated.stderr.endswith("10 document(s) checked: 10 valid, 0 invalid, 0 skipped; 0 file error(s): valid\n")
    docs = [yaml.safe_load(Path(f).read_text()) for f in files]
    assert validate_documents(docs).problems == []


def test_the_import_command_imports_no_temporal_or_kubernetes_code() -> None:
    code = ("import sys; from cli import main; main.build_parser(main.modules_for(['import', 'x'])); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'workflows', 'activities', 'crd_bridge', 'temporalio', 'kubernetes', 'fleetsim', 'bench', 'localstack'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
    assert "--policy-name [OLD=]NEW" in noderoll("import", "--help").stdout
