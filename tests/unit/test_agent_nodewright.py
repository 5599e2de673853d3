"""NodeWright's package environment, item by item, with the agent as a real subprocess (issue 15, item 2).

Every run is `--simulate`: steps run chrooted into the temporary root (agent.sandbox), so what a
step writes at an absolute path is looked for under that root.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent import modes, nodewright, steplogs
from agent.config import Step
from tests.unit.test_agent import a_package, agent

STEP = {"arguments": [], "returncodes": [0], "on_host": True, "idempotence": False, "upgrade_step": False}


def nodewright_package(path: Path, modes_: dict[str, list[tuple[str, str, dict[str, Any]]]]) -> Path:
    """A package in NodeWright's image layout: config.json, steps under skyhook_dir/ (mode -> [(name, body, fields)])."""
    (path / "skyhook_dir").mkdir(parents=True, exist_ok=True)
    doc_modes: dict[str, list[dict[str, Any]]] = {}
    for mode, steps in modes_.items():
        for name, body, fields in steps:
            (path / "skyhook_dir" / f"{name}.sh").write_text("#!/bin/sh\n" + body + "\n")
            (path / "skyhook_dir" / f"{name}.sh").chmod(0o755)
            doc_modes.setdefault(mode, []).append({"name": name, "path": f"{name}.sh", **STEP, **fields})
    (path / "config.json").write_text(json.dumps({"schema_version": "v1", "package_name": "tuning",
                                                  "package_version": "2.0.2", "expected_config_files": [],
                                                  "modes": doc_modes}))
    return path


def test_skyhook_dir_holds_the_package_its_config_and_the_node_metadata(tmp_path: Path) -> None:
    body = ('cat "$SKYHOOK_DIR/configmaps/sysctl.conf" "$SKYHOOK_DIR/node-metadata/labels.json" '
            '"$SKYHOOK_DIR/node-metadata/annotations.json" "$SKYHOOK_DIR/node-metadata/packages.json" > /seen; '
            'test -x "$STEP_ROOT/apply.sh" && test -f "$SKYHOOK_DIR/config.json" && echo "$SKYHOOK_DIR" >> /seen')
    package = nodewright_package(tmp_path / "pkg", {"apply": [("apply", body, {})], "apply-check": [("c", "true", {})]})
    config, metadata = tmp_path / "config", tmp_path / "meta"
    config.mkdir()
    metadata.mkdir()
    (config / "sysctl.conf").write_text("vm.swappiness = 1\n")
    for name, data in (("labels.json", {"zone": "a"}), ("annotations.json", {"note": "x"}),
                       ("packages.json", {"agentVersion": "0.1.0", "packages": {"tuning": {"version": "2.0.2"}}})):
        (metadata / name).write_text(json.dumps(data) + "\n")
    result = agent("apply", tmp_path / "root", package, "--config-dir", str(config), "--node-metadata-dir", str(metadata))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (tmp_path / "root/seen").read_text().splitlines()
    assert lines[0] == "vm.swappiness = 1"
    assert [json.loads(line) for line in lines[1:4]] == [
        {"zone": "a"}, {"note": "x"}, {"agentVersion": "0.1.0", "packages": {"tuning": {"version": "2.0.2"}}}]
    assert lines[4] == "/var/lib/noderoll/tuning/2.0.2/package"


def test_node_metadata_mounted_inside_the_package_as_nodewright_does(tmp_path: Path) -> None:
    package = nodewright_package(tmp_path / "pkg", {"apply": [("apply", 'cat "$SKYHOOK_DIR/node-metadata/labels.json" > /seen', {})],
                                                    "apply-check": [("c", "true", {})]})
    (package / "node-metadata").mkdir()
    (package / "node-metadata/labels.json").write_text('{"kubernetes.io/hostname": "n1"}')
    assert agent("apply", tmp_path / "root", package).returncode == 0
    assert json.loads((tmp_path / "root/seen").read_text()) == {"kubernetes.io/hostname": "n1"}


def test_resource_id_gives_nodewright_tuning_its_own_file_name(tmp_path: Path) -> None:
    # NodeWright's tuning package derives its drop-in name from the second field of SKYHOOK_RESOURCE_ID.
    body = ('package_name=$(echo ${SKYHOOK_RESOURCE_ID} | cut -f 2 -d _); mkdir -p /etc/sysctl.d; '
            'echo "vm.swappiness = 1" > /etc/sysctl.d/999-${package_name}-tuning.conf')
    package = nodewright_package(tmp_path / "pkg", {"apply": [("apply", body, {})], "apply-check": [("c", "true", {})]})
    env = {"SKYHOOK_RESOURCE_ID": "gpu-tuning-6f1c1e6e-5f7a-4c1e-9d55-0d7c2a9f1b10-3_gpu-tuning_2.0.2"}
    assert agent("apply", tmp_path / "root", package, env=env).returncode == 0
    assert (tmp_path / "root/etc/sysctl.d/999-gpu-tuning-tuning.conf").read_text() == "vm.swappiness = 1\n"


@pytest.mark.parametrize(("given", "seen"), [pytest.param("7", "7", id="from-the-pod"),
                                             pytest.param(None, "0", id="nodewright-default")])
def test_node_order_reaches_the_step(tmp_path: Path, given: str | None, seen: str) -> None:
    package = a_package(tmp_path).step("apply", "order", 'echo "$SKYHOOK_NODE_ORDER" > /order').step("apply-check", "c", "true").write()
    env = {"SKYHOOK_NODE_ORDER": given} if given is not None else {}
    assert agent("apply", tmp_path / "root", package, env=env).returncode == 0
    assert (tmp_path / "root/order").read_text() == f"{seen}\n"


def test_step_without_the_executable_bit_runs(tmp_path: Path) -> None:
    package = a_package(tmp_path).step("apply", "plain", "echo ran > /ran").step("apply-check", "c", "true").write()
    (package / "plain.sh").chmod(0o644)
    result = agent("apply", tmp_path / "root", package)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "root/ran").read_text() == "ran\n"
    assert not os.access(package / "plain.sh", os.X_OK)  # the image's file is left as it is


def _interrupt_cases() -> list[Any]:
    data = {"type": "service_restart", "services": ["containerd"]}
    b64 = base64.b64encode(json.dumps(data).encode()).decode()
    return [
        pytest.param([], {"NODEROLL_INTERRUPT": json.dumps(data)}, id="noderoll-env-json"),
        pytest.param([], {"NODEROLL_INTERRUPT": b64}, id="env-base64-json"),
        pytest.param(["/var/lib/skyhook/x/pkg", b64], {}, id="nodewright-positional-base64"),
    ]


@pytest.mark.parametrize(("extra", "env"), _interrupt_cases())
def test_both_interrupt_argument_forms(tmp_path: Path, extra: list[str], env: dict[str, str]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    argv = [sys.executable, "-m", "agent", "interrupt", str(root), *extra, "--simulate"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NODEROLL_")}
    result = subprocess.run(argv, capture_output=True, text=True, env={**clean, **env}, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    record = json.loads((root / "var/lib/noderoll/interrupts.log").read_text())
    assert (record["type"], record["services"]) == ("service", ["containerd"])


def test_an_interrupt_that_is_neither_json_nor_base64_is_refused(tmp_path: Path) -> None:
    result = agent("interrupt", tmp_path / "root", tmp_path, env={"NODEROLL_INTERRUPT": "reboot please"})
    assert result.returncode == modes.EXIT_INTERRUPT_INVALID
    assert "neither JSON nor base64 JSON" in result.stderr


def test_nodewright_positional_form_finds_the_package_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    nodewright_package(root / "var/lib/skyhook/sh/tuning-2.0.2-uid-1", {"apply": [("apply", "echo ok > /ok", {})],
                                                                        "apply-check": [("c", "true", {})]})
    argv = [sys.executable, "-m", "agent", "apply", str(root), "/var/lib/skyhook/sh/tuning-2.0.2-uid-1", "--simulate"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert (root / "ok").read_text() == "ok\n"


def test_step_logs_on_the_host_keep_the_newest_five(tmp_path: Path) -> None:
    body = 'n=$(cat /n 2>/dev/null || echo 0); echo "run $n"; echo $((n + 1)) > /n'
    package = a_package(tmp_path).step("apply", "say", body, idempotence=True)
    package = package.step("apply-check", "c", "true").write()
    for _ in range(7):
        assert agent("apply", tmp_path / "root", package).returncode == 0
    logs = sorted((tmp_path / "root" / steplogs.LOG_SUBDIR / "demo/1.0.0").glob("say.sh-*.log"))
    assert len(logs) == steplogs.KEEP
    assert logs[-1].read_text().splitlines()[0].endswith(" run 6")
    assert logs[0].read_text().splitlines()[0].endswith(" run 2")
    assert "noderoll-agent: step say exited 0" in logs[-1].read_text()
    off = agent("apply", tmp_path / "other", package, env={"SKYHOOK_AGENT_WRITE_LOGS": "false"})
    assert off.returncode == 0 and not (tmp_path / "other" / steplogs.LOG_SUBDIR).exists()


def _write_flag(root: Path, skyhook: str, name: str) -> None:
    flag = root / "var/lib/skyhook" / skyhook / "flags/tuning/2.0.2" / name
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.write_text("last_run: 2025-01-01T00:00:00\n")


def _counting_package(path: Path, idempotence: bool, arguments: list[str] | None = None) -> Path:
    fields = {"idempotence": idempotence, "arguments": arguments or ["--fast"]}
    return nodewright_package(path, {"apply": [("apply", "echo x >> /count", fields)], "apply-check": [("c", "true", {})]})


def _step(package: Path) -> Step:
    raw = json.loads((package / "config.json").read_text())["modes"]["apply"][0]
    return Step(name=raw["name"], path=raw["path"], arguments=tuple(raw["arguments"]),
                returncodes=tuple(raw["returncodes"]), idempotence=raw["idempotence"])


@pytest.mark.parametrize("layout", ["python-agent", "go-agent"])
@pytest.mark.parametrize(("idempotence", "runs"), [pytest.param(False, 0, id="once-only-step-not-rerun"),
                                                   pytest.param(True, 1, id="self-idempotent-step-runs")])
def test_steps_completed_under_nodewright_are_not_run_again(tmp_path: Path, layout: str, idempotence: bool, runs: int) -> None:
    package = _counting_package(tmp_path / "pkg", idempotence)
    step = _step(package)
    name = nodewright.python_flag_name(step) if layout == "python-agent" else nodewright.go_flag_name(step)
    _write_flag(tmp_path / "root", "customer-gpu", name)
    result = agent("apply", tmp_path / "root", package)
    assert result.returncode == 0, result.stderr
    count = tmp_path / "root/count"
    assert (len(count.read_text().splitlines()) if count.exists() else 0) == runs
    if not idempotence:
        assert "completed under NodeWright (/var/lib/skyhook/customer-gpu/flags/tuning/2.0.2/" in result.stdout


def test_a_changed_step_runs_despite_an_old_nodewright_flag(tmp_path: Path) -> None:
    old = _step(_counting_package(tmp_path / "old", False, ["--slow"]))
    _write_flag(tmp_path / "root", "s", nodewright.python_flag_name(old))
    assert agent("apply", tmp_path / "root", _counting_package(tmp_path / "pkg", False, ["--fast"])).returncode == 0
    assert (tmp_path / "root/count").read_text() == "x\n"


def test_python_agent_flag_name_is_nodewrights_expression() -> None:
    step = Step(name="s", path="apply.sh", arguments=("it's", "env:X"), returncodes=(0, 3))
    # controller.py make_flag_path: base64 of f"{step.arguments}_{step.returncodes}" (Python lists).
    marker = base64.b64encode(bytes(f"{['it' + chr(39) + 's', 'env:X']}_{[0, 3]}", "utf-8")).decode("utf-8")
    assert nodewright.python_flag_name(step) == f"apply.sh_{marker}"


GO_FINGERPRINT = """package main

import (
\t"crypto/sha256"
\t"encoding/hex"
\t"encoding/json"
\t"fmt"
\t"os"
)

func main() {
\tvar in struct {
\t\tPath        string            `json:"path"`
\t\tArguments   []string          `json:"arguments"`
\t\tReturnCodes []int             `json:"returnCodes"`
\t\tEnv         map[string]string `json:"env"`
\t\tOnHost      bool              `json:"onHost"`
\t}
\tif err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
\t\tpanic(err)
\t}
\tpayload, _ := json.Marshal(in)
\tsum := sha256.Sum256(payload)
\tfmt.Print(hex.EncodeToString(sum[:]))
}
"""


def test_go_agent_fingerprint_matches_go(tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain on PATH to compute NodeWright's Go fingerprint with")
    step = Step(name="s", path="sub/apply.sh", arguments=("<a&b>", "tab\there", "é", "\x01"), returncodes=(0, 2),
                on_host=False, env={"B": "2", "A": "x\u2028y"})
    (tmp_path / "main.go").write_text(GO_FINGERPRINT)
    wire = {"path": step.path, "arguments": list(step.arguments), "returnCodes": list(step.returncodes),
            "env": step.env, "onHost": step.on_host}
    env = {**os.environ, "GO111MODULE": "off", "GOFLAGS": "", "GOCACHE": str(tmp_path / "gocache")}
    out = subprocess.run([go, "run", str(tmp_path / "main.go")], input=json.dumps(wire), capture_output=True,
                         text=True, env=env, timeout=240, check=True).stdout
    assert nodewright.go_flag_name(step) == f"apply.sh-{out}.flag"


def test_upgrade_learns_the_version_nodewright_installed(tmp_path: Path) -> None:
    history = tmp_path / "root/var/lib/skyhook/s/history/tuning.json"
    history.parent.mkdir(parents=True)
    history.write_text(json.dumps({"current-version": "2.0.1", "history": [{"version": "2.0.1", "time": "t"}]}))
    package = nodewright_package(tmp_path / "pkg", {
        "apply": [("apply", "true", {})], "apply-check": [("c", "true", {})],
        "upgrade": [("up", 'echo "$1 -> $2 ($PREVIOUS_VERSION)" > /up', {"upgrade_step": True})],
        "upgrade-check": [("upc", "true", {})]})
    assert agent("upgrade", tmp_path / "root", package).returncode == 0
    assert (tmp_path / "root/up").read_text() == "2.0.1 -> 2.0.2 (2.0.1)\n"
    (tmp_path / "root/var/lib/skyhook").rename(tmp_path / "elsewhere")
    assert agent("upgrade", tmp_path / "fresh", package).returncode == 0
    assert (tmp_path / "fresh/up").read_text() == "unknown -> 2.0.2 (unknown)\n"


def test_the_nodewright_layout_example_runs_its_lifecycle(tmp_path: Path) -> None:
    package = Path(__file__).resolve().parents[2] / "deploy/examples/packages/nodewright-tuning/skyhook-package"
    config, metadata = tmp_path / "config", tmp_path / "meta"
    config.mkdir()
    metadata.mkdir()
    (config / "sysctl.conf").write_text("vm.max_map_count = 262144\n")
    (metadata / "labels.json").write_text('{"kubernetes.io/hostname": "gpu-7"}')
    env = {"SKYHOOK_RESOURCE_ID": "nwt-uid-1_nwt_1.0.0", "SKYHOOK_NODE_ORDER": "2"}
    root = tmp_path / "root"
    drop_in = root / "etc/sysctl.d/999-nwt-tuning.conf"
    for mode in ("apply", "apply-check", "config", "config-check"):
        result = agent(mode, root, package, "--config-dir", str(config), "--node-metadata-dir", str(metadata), env=env)
        assert result.returncode == 0, f"{mode}: {result.stdout}{result.stderr}"
    assert drop_in.read_text() == "vm.max_map_count = 262144\n"
    assert (root / "etc/nodewright-tuning/nwt.order").read_text() == "2\n"
    for mode in ("uninstall", "uninstall-check"):
        assert agent(mode, root, package, "--config-dir", str(config), env=env).returncode == 0
    assert not drop_in.exists()
