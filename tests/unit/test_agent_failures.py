"""Every way the agent can fail ends with `noderoll-agent: FAILED: <reason>` and a documented exit code.

The agent runs as a real subprocess. Interrupts run for real (no `--simulate`) in a chroot of a
minimal host root built by `tests.helpers.hostroot` (this machine's /bin/sh plus scripts standing in
for `systemctl`), so nothing touches the machine itself; those cases need root and skip otherwise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent import cli, modes
from tests.helpers.hostroot import a_host_root, add_command, can_chroot

DOC = Path(__file__).resolve().parents[2] / "docs" / "agent.md"
FAILED = "noderoll-agent: FAILED: "
# A PATH with the Python interpreter only: no chroot, no systemctl, no shell tools (issue 12, item 6).
BARE_PATH = str(Path(sys.executable).parent)


def documented_exit_codes() -> set[int]:
    """The numeric codes of the table under '## Exit codes' in docs/agent.md."""
    section = DOC.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", section, re.MULTILINE)}


def package(path: Path, steps: dict[str, str]) -> Path:
    """A package folder whose modes each have one step with the given shell body (and a check)."""
    path.mkdir(parents=True, exist_ok=True)
    doc_modes: dict[str, list[dict[str, object]]] = {}
    for mode, body in steps.items():
        (path / f"{mode}.sh").write_text("#!/bin/sh\n" + body + "\n")
        (path / f"{mode}.sh").chmod(0o755)
        doc_modes[mode] = [{"name": mode, "path": f"{mode}.sh", "arguments": [], "returncodes": [0],
                            "on_host": True, "idempotence": False, "upgrade_step": False}]
    (path / "config.json").write_text(json.dumps({
        "schema_version": "v1", "package_name": "p", "package_version": "1.0.0",
        "expected_config_files": [], "modes": doc_modes}))
    return path


def run_agent(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NODEROLL_", "SKYHOOK_"))}
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True,
                          env={**clean, **(env or {})}, timeout=60, check=False)


def interrupt_env(data: dict[str, object], **extra: str) -> dict[str, str]:
    return {"NODEROLL_INTERRUPT": json.dumps(data), **extra}


@dataclass(frozen=True)
class Scenario:
    """One failure: how to set it up (returns the agent's arguments and environment) and its outcome."""

    setup: Callable[[Path], tuple[list[str], dict[str, str]]]
    code: int
    reason: str  # a regular expression the FAILED line must match
    chroot: bool = False  # runs host commands in a chroot: needs root


def _simulated(tmp: Path, mode: str, steps: dict[str, str], **env: str) -> tuple[list[str], dict[str, str]]:
    pkg = package(tmp / "pkg", steps)
    (tmp / "root").mkdir(exist_ok=True)
    return [mode, "--root", str(tmp / "root"), "--package-dir", str(pkg), "--simulate"], env


def _host(tmp: Path, commands: dict[str, str], data: dict[str, object], **env: str) -> tuple[list[str], dict[str, str]]:
    root = a_host_root(tmp / "host")
    for name, script in commands.items():
        add_command(root, name, script)
    return ["interrupt", "--root", str(root)], interrupt_env(data, **env)


def _root_is_a_file(tmp: Path) -> tuple[list[str], dict[str, str]]:
    (tmp / "root").write_text("not a directory")
    return ["apply", "--root", str(tmp / "root"), "--package-dir", str(package(tmp / "pkg", {"apply": "true", "apply-check": "true"})), "--simulate"], {}


def _state_dir_is_a_file(tmp: Path) -> tuple[list[str], dict[str, str]]:
    (tmp / "root/var/lib").mkdir(parents=True)
    (tmp / "root/var/lib/noderoll").write_text("a file where the agent keeps its state")
    return _simulated(tmp, "apply", {"apply": "true", "apply-check": "true"})


def _no_config(tmp: Path) -> tuple[list[str], dict[str, str]]:
    (tmp / "pkg").mkdir()
    return ["apply", "--root", str(tmp / "root"), "--package-dir", str(tmp / "pkg"), "--simulate"], {}


def _garbage_config(tmp: Path) -> tuple[list[str], dict[str, str]]:
    (tmp / "pkg").mkdir()
    (tmp / "pkg/config.json").write_text("{not json")
    return ["apply", "--root", str(tmp / "root"), "--package-dir", str(tmp / "pkg"), "--simulate"], {}


def _missing_expected_file(tmp: Path) -> tuple[list[str], dict[str, str]]:
    args, env = _simulated(tmp, "apply", {"apply": "true", "apply-check": "true"})
    doc = json.loads((tmp / "pkg/config.json").read_text())
    (tmp / "pkg/config.json").write_text(json.dumps({**doc, "expected_config_files": ["needed.conf"]}))
    return args, env


def _step_missing(tmp: Path) -> tuple[list[str], dict[str, str]]:
    args, env = _simulated(tmp, "apply", {"apply": "true", "apply-check": "true"})
    (tmp / "pkg/apply.sh").unlink()
    return args, env


SCENARIOS = [
    pytest.param(Scenario(lambda t: _simulated(t, "deploy", {"apply": "true", "apply-check": "true"}),
                          modes.EXIT_USAGE, "unknown mode 'deploy'"), id="unknown-mode"),
    pytest.param(Scenario(_garbage_config, modes.EXIT_CONFIG_INVALID, "cannot read .*config.json"), id="config-not-json"),
    pytest.param(Scenario(_no_config, modes.EXIT_CONFIG_MISSING, "no config.json"), id="config-missing"),
    pytest.param(Scenario(_missing_expected_file, modes.EXIT_CONFIG_FILE_MISSING, "needed.conf is missing"),
                 id="expected-config-file-missing"),
    pytest.param(Scenario(lambda t: _simulated(t, "interrupt", {"apply": "true", "apply-check": "true"}),
                          modes.EXIT_INTERRUPT_INVALID, "needs NODEROLL_INTERRUPT"), id="interrupt-without-data"),
    pytest.param(Scenario(_root_is_a_file, modes.EXIT_HOST, "is not a directory"), id="root-not-a-directory"),
    pytest.param(Scenario(_state_dir_is_a_file, modes.EXIT_HOST, "host I/O failed: .*var/lib/noderoll"),
                 id="host-state-unwritable"),
    pytest.param(Scenario(_step_missing, modes.EXIT_STEP_NOT_FOUND, "apply.sh not found"), id="step-missing"),
    pytest.param(Scenario(lambda t: _simulated(t, "apply", {"apply": "echo trying; exit 5", "apply-check": "true"}),
                          5, r"step apply exited 5, accepted \[0\]"), id="step-exit-code-passes-through"),
    pytest.param(Scenario(lambda t: _simulated(t, "apply", {"apply": "kill -TERM $PPID", "apply-check": "true"}),
                          modes.EXIT_TERMINATED, "terminated during mode apply"), id="sigterm"),
    pytest.param(Scenario(lambda t: _host(t, {"systemctl": 'echo "System has not been booted with systemd"; exit 1'},
                                          {"type": "reboot"}),
                          1, "systemctl reboot exited 1: System has not been booted with systemd", chroot=True),
                 id="reboot-command-exits-1"),
    pytest.param(Scenario(lambda t: _host(t, {}, {"type": "reboot"}), modes.EXIT_STEP_NOT_FOUND,
                          "systemctl reboot: systemctl not found in the host root", chroot=True),
                 id="reboot-without-systemctl"),
    pytest.param(Scenario(lambda t: _host(t, {"systemctl": "echo queued; exit 0"}, {"type": "reboot"},
                                          NODEROLL_REBOOT_WAIT_SECONDS="0.5"),
                          modes.EXIT_REBOOT_NOT_DONE, "exited 0 but the host did not shut down within 0.5s: queued",
                          chroot=True),
                 id="reboot-accepted-but-nothing-happens"),
    pytest.param(Scenario(lambda t: _host(t, {"systemctl": 'kill -KILL $$'}, {"type": "node_restart"}),
                          128 + 9, "systemctl reboot was killed by SIGKILL", chroot=True),
                 id="reboot-command-killed-by-another-signal"),
    pytest.param(Scenario(lambda t: _host(t, {"systemctl": '[ "$1" = restart ] && { echo "Unit $2.service not found."; exit 5; }; exit 0'},
                                          {"type": "service", "services": ["nvidia-fabricmanager"]}),
                          5, "systemctl restart nvidia-fabricmanager exited 5: Unit nvidia-fabricmanager.service not found",
                          chroot=True),
                 id="service-restart-fails"),
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_failure_ends_with_the_failed_line_and_a_documented_code(tmp_path: Path, scenario: Scenario) -> None:
    if scenario.chroot and can_chroot():
        pytest.skip(can_chroot())
    args, env = scenario.setup(tmp_path)
    result = run_agent(args, {"PATH": BARE_PATH, **env})
    assert result.returncode == scenario.code, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(FAILED), result.stderr
    assert re.search(scenario.reason, last), last
    assert "Traceback" not in result.stderr
    passthrough = 0 < scenario.code < 256 and scenario.code not in vars(modes).values()
    assert passthrough or scenario.code in documented_exit_codes()


def test_every_exit_code_of_the_agent_is_documented() -> None:
    codes = {value for name, value in vars(modes).items() if name.startswith("EXIT_")}
    assert codes <= documented_exit_codes()


def test_an_unexpected_exception_still_ends_with_the_failed_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A defect cannot be provoked from outside, so one is planted: the config loader raises.
    def broken(_path: Path) -> None:
        raise KeyError("modes")

    monkeypatch.setattr(cli, "load_config", broken)
    pkg = package(tmp_path / "pkg", {"apply": "true", "apply-check": "true"})
    code = cli.main(["apply", "--root", str(tmp_path / "root"), "--package-dir", str(pkg), "--simulate"])
    err = capsys.readouterr().err
    assert code == modes.EXIT_INTERNAL
    assert "Traceback" in err
    assert err.strip().splitlines()[-1] == f"{FAILED}internal error: KeyError: 'modes'"


@pytest.mark.skipif(bool(can_chroot()), reason=can_chroot() or "root")
@pytest.mark.parametrize(
    ("systemctl", "said"),
    [
        pytest.param("kill -TERM $$", "was stopped by SIGTERM", id="reboot-command-stopped-by-the-shutdown"),
        pytest.param("kill -TERM $PPID; exit 0", "SIGTERM received: the host is shutting down",
                     id="agent-stopped-by-the-shutdown-after-the-command"),
    ],
)
def test_only_the_shutdown_itself_makes_a_reboot_succeed(tmp_path: Path, systemctl: str, said: str) -> None:
    args, env = _host(tmp_path, {"systemctl": f'echo "$@" >> /systemctl.log; {systemctl}'}, {"type": "reboot"},
                      NODEROLL_REBOOT_WAIT_SECONDS="30")
    result = run_agent(args, {"PATH": BARE_PATH, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    assert said in result.stdout
    assert (tmp_path / "host/systemctl.log").read_text() == "reboot\n"


@pytest.mark.skipif(bool(can_chroot()), reason=can_chroot() or "root")
def test_service_interrupt_runs_in_the_host_root_without_a_chroot_binary(tmp_path: Path) -> None:
    args, env = _host(tmp_path, {"systemctl": 'echo "$@" >> /systemctl.log'},
                      {"type": "service", "services": ["containerd", "cron"]})
    result = run_agent(args, {"PATH": BARE_PATH, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "host/systemctl.log").read_text().splitlines() == [
        "daemon-reload", "restart containerd", "restart cron"]
    record = json.loads((tmp_path / "host/var/lib/noderoll/interrupts.log").read_text())
    assert record["simulated"] is False and record["services"] == ["containerd", "cron"]
