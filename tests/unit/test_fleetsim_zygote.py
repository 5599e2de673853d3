"""fleetsim's agent zygote (issue #14): agent runs forked from one warm process, each confined to its
sandbox like a separately started agent, killable like a container; the zygote itself never enters a
namespace, and one that died is started again."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetsim.agents import AgentRun, AgentZygote
from tests.helpers import unique_name
from tests.unit.test_agent import a_package

TIMEOUT = 30.0


@pytest.fixture
def zygote() -> Iterator[AgentZygote]:
    agents = AgentZygote()
    try:
        yield agents
    finally:
        agents.close()


def run(agents: AgentZygote, mode: str, root: Path, package: Path) -> AgentRun:
    root.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODEROLL_SIMULATE": "1"}
    return agents.run([mode, "--root", str(root), "--package-dir", str(package), "--simulate"], env, str(root))


def output(proc: AgentRun) -> str:
    text = proc.stdout.read().decode()
    proc.stdout.close()
    return text


def test_a_forked_run_is_confined_to_its_sandbox_and_the_zygote_is_not(zygote: AgentZygote, tmp_path: Path) -> None:
    name = unique_name("zygote")
    machine = [Path("/etc") / name, Path("/var/tmp") / name]
    package = a_package(tmp_path).step("apply", "write", f"echo etc > /etc/{name}; echo var > /var/tmp/{name}") \
        .step("apply-check", "c", "true").write()
    first = run(zygote, "apply", tmp_path / "root-a", package)
    text = output(first)
    assert first.wait(TIMEOUT) == 0, text
    assert "noderoll-agent: mode apply of" in text
    assert (tmp_path / "root-a/etc" / name).read_text() == "etc\n"
    assert (tmp_path / "root-a/var/tmp" / name).read_text() == "var\n"
    assert not any(path.exists() for path in machine), "a step reached the machine"
    # A second run: the same zygote forks again, into its own sandbox.
    second = run(zygote, "apply", tmp_path / "root-b", package)
    assert second.wait(TIMEOUT) == 0, output(second)
    assert (tmp_path / "root-b/etc" / name).exists()
    assert zygote.pid is not None and first.pid not in (0, zygote.pid) and second.pid != first.pid
    # The runs entered their own mount namespaces; the zygote kept this process's.
    assert os.readlink(f"/proc/{zygote.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")


def test_a_killed_run_ends_with_its_signal(zygote: AgentZygote, tmp_path: Path) -> None:
    package = a_package(tmp_path).step("apply", "wait", "echo started; sleep 60").step("apply-check", "c", "true").write()
    proc = run(zygote, "apply", tmp_path / "root", package)
    assert proc.stdout.readline().startswith(b"noderoll-agent:")  # it runs
    proc.kill()  # the end of a grace period: the whole process group, the step included
    assert proc.wait(TIMEOUT) == -signal.SIGKILL


def test_a_zygote_that_died_is_started_again(zygote: AgentZygote, tmp_path: Path) -> None:
    package = a_package(tmp_path).step("apply", "ok", "true").step("apply-check", "c", "true").write()
    first = run(zygote, "apply", tmp_path / "root", package)
    assert first.wait(TIMEOUT) == 0
    dead = zygote.pid
    assert dead is not None
    os.kill(dead, signal.SIGKILL)
    os.waitpid(dead, 0)
    again = run(zygote, "apply", tmp_path / "root", package)
    assert again.wait(TIMEOUT) == 0, output(again)
    assert zygote.pid not in (None, dead)
