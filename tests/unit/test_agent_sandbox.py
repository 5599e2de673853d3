"""`--simulate` confines steps to the sandbox root (agent.sandbox): the machine running it is never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import agent as agent_module
from agent import modes
from tests.helpers import unique_name
from tests.unit.test_agent import a_package, agent


def test_absolute_paths_land_in_the_sandbox_and_nowhere_on_the_machine(tmp_path: Path) -> None:
    name = unique_name("sandbox")
    machine = [Path("/etc") / name, Path("/var/tmp") / name]
    body = (f'echo etc > /etc/{name}; echo var > /var/tmp/{name}; '
            f'if touch /usr/{name} 2>/dev/null; then echo usr-writable; else echo usr-read-only; fi; '
            'ls /proc/1 >/dev/null 2>&1 && echo proc-visible || echo no-proc')
    package = a_package(tmp_path).step("apply", "write", body).step("apply-check", "c", "true").write()
    assert not any(path.exists() for path in machine)
    result = agent("apply", tmp_path / "root", package)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "root/etc" / name).read_text() == "etc\n"
    assert (tmp_path / "root/var/tmp" / name).read_text() == "var\n"
    assert "[write] usr-read-only" in result.stdout and "[write] no-proc" in result.stdout
    assert not any(path.exists() for path in machine)
    assert not (Path("/usr") / name).exists()


def test_a_sandbox_folder_linked_outside_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root/etc").symlink_to(outside)
    package = a_package(tmp_path).step("apply", "write", "echo x > /etc/x").step("apply-check", "c", "true").write()
    result = agent("apply", tmp_path / "root", package)
    assert result.returncode == modes.EXIT_HOST
    assert "outside the sandbox: refusing to run steps" in result.stderr
    assert list(outside.iterdir()) == []


def test_simulating_on_the_machine_root_is_refused(tmp_path: Path) -> None:
    package = a_package(tmp_path).step("apply", "write", "true").step("apply-check", "c", "true").write()
    result = agent("apply", Path("/"), package)
    assert result.returncode == modes.EXIT_HOST
    assert "refusing to run steps on this machine" in result.stderr


def test_a_non_root_agent_confines_its_steps_in_a_user_namespace() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to become another user) and setpriv")
    # pytest's tmp_path is private to root: the other user needs a folder it can reach.
    tmp_path = Path(tempfile.mkdtemp(prefix="noderoll-nonroot-"))
    try:
        _run_as_nobody(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _run_as_nobody(tmp_path: Path) -> None:
    package = a_package(tmp_path).step("apply", "write", "echo x > /etc/x; id -u").step("apply-check", "c", "true").write()
    (tmp_path / "root").mkdir()
    # The agent as a package pod has it: its own copy (it imports nothing else of noderoll), where the
    # other user can read it. The checkout may not be readable by that user (a clone made in a
    # `mktemp -d` folder is 0700: "No module named agent").
    shutil.copytree(Path(agent_module.__file__).parent, tmp_path / "lib" / "agent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in (tmp_path, *tmp_path.rglob("*")):
        os.chown(path, 65534, 65534)
    tmp_path.chmod(0o755)
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "agent", "apply",
            "--root", str(tmp_path / "root"), "--package-dir", str(package), "--simulate"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "lib")})
    if result.returncode == modes.EXIT_HOST and "CLONE_NEWUSER" in result.stderr:
        pytest.skip(f"this kernel allows no unprivileged user namespace: {result.stderr.strip()}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "root/etc/x").read_text() == "x\n"
    assert "[write] 0" in result.stdout  # root inside its own user namespace, nobody outside


def test_debian_alternatives_resolve_in_the_sandbox(tmp_path: Path) -> None:
    """`/usr/bin/awk` is a link through /etc/alternatives on Debian: the sandbox shows that folder (read-only),
    so a step's `awk` runs as on the machine instead of "not found"."""
    if not Path("/etc/alternatives/awk").exists():
        pytest.skip("this machine has no /etc/alternatives/awk")
    body = ('awk "BEGIN { print 6 * 7 }"; '
            'if touch /etc/alternatives/x 2>/dev/null; then echo alternatives-writable; else echo alternatives-read-only; fi')
    package = a_package(tmp_path).step("apply", "calc", body).step("apply-check", "c", "true").write()
    result = agent("apply", tmp_path / "root", package)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[calc] 42" in result.stdout and "[calc] alternatives-read-only" in result.stdout


def test_bench_sleep_takes_its_time_factor(tmp_path: Path) -> None:
    """fleetsim's --jitter-percent reaches the bench package's stages: 0.2 s times 2.5 is 0.5 s. Until
    2026-12-06 the stage fell back to the plain time when awk was not found, so the jittered benchmarks
    scaled the reboots only."""
    package = Path(agent_module.__file__).resolve().parent.parent / "bench" / "packages" / "bench-sleep"
    result = agent("apply", tmp_path / "root", package, env={"BENCH_STAGE_SECONDS": "0.2", "FLEETSIM_TIME_FACTOR": "2.5"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bench-sleep: apply done after 0.5s" in result.stdout
