"""The package agent as a real subprocess (`python -m agent`) in temporary directories, no mocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent import modes
from api.enums import Stage

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "packages"


@dataclass
class PackageBuilder:
    """Builds a package folder: config.json plus shell step scripts."""

    root: Path
    name: str = "demo"
    version: str = "1.0.0"
    modes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    expected: list[str] = field(default_factory=list)

    def step(self, mode: str, name: str, script: str, **fields: Any) -> PackageBuilder:
        path = f"{name}.sh"
        (self.root / path).write_text("#!/bin/sh\n" + script + "\n")
        (self.root / path).chmod(0o755)
        step = {"name": name, "path": path, "arguments": [], "returncodes": [0], "on_host": True,
                "idempotence": False, "upgrade_step": False, **fields}
        self.modes.setdefault(mode, []).append(step)
        return self

    def write(self, **overrides: Any) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        doc = {"schema_version": "v1", "package_name": self.name, "package_version": self.version,
               "expected_config_files": self.expected, "modes": self.modes, **overrides}
        (self.root / "config.json").write_text(json.dumps(doc))
        return self.root


def a_package(tmp_path: Path) -> PackageBuilder:
    (tmp_path / "pkg").mkdir(exist_ok=True)
    return PackageBuilder(tmp_path / "pkg")


def with_counter(builder: PackageBuilder, mode: str = "apply", **fields: Any) -> PackageBuilder:
    """A mode whose step appends a line to <root>/count and a check that always passes."""
    builder.step(mode, f"{mode}-step", 'echo run >> "$NODEROLL_ROOT/count"; echo counted', **fields)
    return builder.step(f"{mode}-check", f"{mode}-verify", 'test -f "$NODEROLL_ROOT/count"')


def agent(mode: str, root: Path, package: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "agent", mode, "--root", str(root), "--package-dir", str(package), "--simulate", *extra]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NODEROLL_")}
    return subprocess.run(argv, capture_output=True, text=True, env={**clean, **(env or {})}, timeout=30, check=False)


def count(root: Path) -> int:
    path = root / "count"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_modes_match_the_api_stage_vocabulary() -> None:
    assert modes.STAGES == tuple(stage.value for stage in Stage)
    assert set(modes.STEP_MODES) == {m for s in Stage if s is not Stage.INTERRUPT for m in (s.value, s.check)}


def test_step_runs_against_the_root_and_is_not_rerun(tmp_path: Path) -> None:
    package = with_counter(a_package(tmp_path)).write()
    first = agent("apply", tmp_path / "root", package)
    assert first.returncode == 0, first.stderr
    assert "[apply-step] counted" in first.stdout
    second = agent("apply", tmp_path / "root", package)
    assert second.returncode == 0
    assert "skipping step apply-step" in second.stdout
    assert count(tmp_path / "root") == 1
    journal = (tmp_path / "root/var/lib/noderoll/demo/1.0.0/history.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in journal] == ["ok", "skipped"]


def test_a_new_version_runs_the_step_again(tmp_path: Path) -> None:
    package = with_counter(a_package(tmp_path)).write()
    agent("apply", tmp_path / "root", package)
    assert agent("apply", tmp_path / "root", package, env={"NODEROLL_VERSION": "1.1.0"}).returncode == 0
    assert count(tmp_path / "root") == 2


@pytest.mark.parametrize(
    ("mode", "fields"),
    [
        pytest.param("apply-check", {}, id="check-modes-always-run"),
        pytest.param("config", {}, id="config-always-runs"),
        pytest.param("apply", {"idempotence": True}, id="self-idempotent-step"),
    ],
)
def test_steps_that_always_rerun(tmp_path: Path, mode: str, fields: dict[str, Any]) -> None:
    builder = a_package(tmp_path)
    base = mode.removesuffix("-check")
    if mode.endswith("-check"):
        builder.step(base, "work", "true").step(mode, "probe", 'echo run >> "$NODEROLL_ROOT/count"')
    else:
        with_counter(builder, base, **fields)
    package = builder.write()
    for _ in range(2):
        assert agent(mode, tmp_path / "root", package).returncode == 0
    assert count(tmp_path / "root") == 2


def test_failing_step_passes_its_exit_code_and_stops(tmp_path: Path) -> None:
    builder = a_package(tmp_path).step("apply", "bad", "echo trying; exit 5").step("apply", "never", "touch \"$NODEROLL_ROOT/x\"")
    package = builder.step("apply-check", "c", "true").write()
    result = agent("apply", tmp_path / "root", package)
    assert result.returncode == 5
    assert "[bad] trying" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "noderoll-agent: FAILED: step bad exited 5, accepted [0]"
    assert not (tmp_path / "root/x").exists()
    # A failed step leaves no flag: the retry runs it again.
    assert "running step bad" in agent("apply", tmp_path / "root", package).stdout


def test_accepted_return_codes(tmp_path: Path) -> None:
    builder = a_package(tmp_path).step("apply", "three", "exit 3", returncodes=[0, 3])
    package = builder.step("apply-check", "zero-refused", "exit 0", returncodes=[1]).write()
    assert agent("apply", tmp_path / "root", package).returncode == 0
    refused = agent("apply-check", tmp_path / "root", package)
    assert refused.returncode == modes.EXIT_STEP_FAILED


def test_check_mode_runs_every_check_and_records_history(tmp_path: Path) -> None:
    builder = a_package(tmp_path).step("apply", "a", "true")
    builder.step("apply-check", "one", "exit 4").step("apply-check", "two", 'touch "$NODEROLL_ROOT/two"')
    package = builder.write()
    result = agent("apply-check", tmp_path / "root", package)
    assert result.returncode == 4
    assert (tmp_path / "root/two").exists()
    history = tmp_path / "root/var/lib/noderoll/demo/history.json"
    assert not history.exists()
    ok = a_package(tmp_path).step("apply", "a", "true").step("apply-check", "fine", "true").write()
    assert agent("apply-check", tmp_path / "root", ok).returncode == 0
    assert json.loads(history.read_text())["current-version"] == "1.0.0"


def test_steps_see_root_package_and_config_files(tmp_path: Path) -> None:
    script = 'cat "$NODEROLL_CONFIG_DIR/greeting" > "$NODEROLL_ROOT/out"; cat "$SKYHOOK_DIR/configmaps/greeting" >> "$NODEROLL_ROOT/out"; pwd >> "$NODEROLL_ROOT/out"'
    builder = a_package(tmp_path).step("apply", "read", script).step("apply-check", "c", "true")
    builder.expected = ["greeting"]
    package = builder.write()
    config = tmp_path / "config"
    config.mkdir()
    missing = agent("apply", tmp_path / "root", package, "--config-dir", str(config))
    assert missing.returncode == modes.EXIT_CONFIG_FILE_MISSING
    (config / "greeting").write_text("hello\n")
    assert agent("apply", tmp_path / "root", package, "--config-dir", str(config)).returncode == 0
    lines = (tmp_path / "root/out").read_text().splitlines()
    assert lines[:2] == ["hello", "hello"]
    # Steps run chrooted into the sandbox: they see the staged package at its path inside the root.
    assert lines[2] == "/var/lib/noderoll/demo/1.0.0/package"


def test_upgrade_step_gets_previous_and_current_version(tmp_path: Path) -> None:
    builder = a_package(tmp_path).step("apply", "a", "true").step("apply-check", "c", "true")
    builder.step("upgrade", "up", 'echo "$1 -> $2 ($PREVIOUS_VERSION)" > "$NODEROLL_ROOT/up"', upgrade_step=True)
    package = builder.step("upgrade-check", "upc", "true").write()
    assert agent("apply-check", tmp_path / "root", package).returncode == 0
    assert agent("upgrade", tmp_path / "root", package, env={"NODEROLL_VERSION": "2.0.0"}).returncode == 0
    assert (tmp_path / "root/up").read_text() == "1.0.0 -> 2.0.0 (1.0.0)\n"


def test_nodewright_layout_with_skyhook_dir(tmp_path: Path) -> None:
    package = tmp_path / "skyhook-package"
    (package / "skyhook_dir").mkdir(parents=True)
    (package / "root_dir/etc").mkdir(parents=True)
    (package / "root_dir/etc/static.conf").write_text("static\n")
    step = {"name": "s", "path": "s.sh", "arguments": ["env:WHO"], "returncodes": [0], "on_host": True,
            "idempotence": False, "upgrade_step": False}
    (package / "skyhook_dir/s.sh").write_text('#!/bin/sh\necho "$1" > "$NODEROLL_ROOT/who"\n')
    (package / "skyhook_dir/s.sh").chmod(0o755)
    doc = {"schema_version": "v1", "package_name": "nw", "package_version": "0.1.0", "expected_config_files": [],
           "modes": {"apply": [step], "apply-check": [{**step, "name": "s-check"}]}}
    (package / "config.json").write_text(json.dumps(doc))
    assert agent("apply", tmp_path / "root", package, env={"WHO": "skyhook"}).returncode == 0
    assert (tmp_path / "root/who").read_text() == "skyhook\n"
    assert (tmp_path / "root/etc/static.conf").read_text() == "static\n"


@pytest.mark.parametrize(
    ("setup", "mode", "code"),
    [
        pytest.param("none", "apply", modes.EXIT_CONFIG_MISSING, id="missing-config"),
        pytest.param("garbage", "apply", modes.EXIT_CONFIG_INVALID, id="not-json"),
        pytest.param("schema-v2", "apply", modes.EXIT_CONFIG_INVALID, id="wrong-schema"),
        pytest.param("no-check", "apply", modes.EXIT_CONFIG_INVALID, id="apply-without-check"),
        pytest.param("ok", "deploy", modes.EXIT_USAGE, id="unknown-mode"),
        pytest.param("missing-step", "apply", modes.EXIT_STEP_NOT_FOUND, id="step-missing"),
        pytest.param("ok", "interrupt", modes.EXIT_INTERRUPT_INVALID, id="interrupt-without-data"),
    ],
)
def test_bad_input_has_distinct_exit_codes(tmp_path: Path, setup: str, mode: str, code: int) -> None:
    builder = with_counter(a_package(tmp_path))
    package = builder.root
    if setup == "garbage":
        (package / "config.json").write_text("{not json")
    elif setup == "schema-v2":
        builder.write(schema_version="v2")
    elif setup == "no-check":
        builder.modes.pop("apply-check")
        builder.write()
    elif setup == "missing-step":
        builder.write()
        (package / "apply-step.sh").unlink()
    elif setup == "ok":
        builder.write()
    result = agent(mode, tmp_path / "root", package)
    assert result.returncode == code, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("noderoll-agent: FAILED: ")


@pytest.mark.parametrize(
    ("data", "services"),
    [
        pytest.param({"type": "reboot"}, [], id="reboot"),
        pytest.param({"type": "service", "services": ["containerd", "cron"]}, ["containerd", "cron"], id="service"),
        pytest.param({"type": "service_restart", "services": ["a"]}, ["a"], id="nodewright-alias"),
        pytest.param({"type": "noop"}, [], id="noop"),
    ],
)
def test_interrupt_is_recorded_in_simulation(tmp_path: Path, data: dict[str, Any], services: list[str]) -> None:
    result = agent("interrupt", tmp_path / "root", tmp_path, env={"NODEROLL_INTERRUPT": json.dumps(data)})
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "root/var/lib/noderoll/interrupts.log").read_text())
    assert record["services"] == services and record["simulated"] is True
    restarted = tmp_path / "root/var/lib/noderoll/restarted-services.log"
    assert (restarted.read_text().split() if restarted.exists() else []) == services


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.iterdir() if (p / "config.json").is_file()))
def test_example_package_lifecycle(tmp_path: Path, name: str) -> None:
    root = tmp_path / "root"
    for mode in ("apply", "apply-check", "config", "config-check", "uninstall", "uninstall-check"):
        result = agent(mode, root, EXAMPLES / name)
        assert result.returncode == 0, f"{mode}: {result.stdout}{result.stderr}"
    assert json.loads((root / f"var/lib/noderoll/{name}/history.json").read_text())["current-version"] == "uninstalled"


def test_sysctl_check_detects_drift(tmp_path: Path) -> None:
    root = tmp_path / "root"
    package = EXAMPLES / "sysctl-tuning"
    assert agent("apply", root, package).returncode == 0
    target = root / "etc/sysctl.d/90-noderoll.conf"
    assert "vm.max_map_count = 262144" in target.read_text()
    target.write_text("vm.max_map_count = 1\n")
    assert agent("apply-check", root, package).returncode == 3
