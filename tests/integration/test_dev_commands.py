"""`dev up|status|down` behave as documented: reuse, free ports, clear failures, nothing left behind.

Each test runs the commands as a user would (a subprocess; `python -m localstack` is the same
code as `noderoll dev`, without the unrelated commands) in its own temporary state dir, and
always stops what it started.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes import client, config

from localstack.components import COMPONENTS, EXECUTABLES
from localstack.processes import stray_processes
from localstack.provision import K8S_BIN_DIR_ENV, k8s_binaries
from localstack.state import load_stack_info

pytestmark = pytest.mark.integration

CONTRACT_KEYS = {"temporal_address", "temporal_ui", "kubeconfig", "state_dir"}
DEFAULT_PORTS = sorted({p for c in COMPONENTS for p in c.default_ports.values() if p})


def dev(state_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m localstack dev <args> --state-dir <state_dir>`."""
    return subprocess.run(
        [sys.executable, "-m", "localstack", "dev", *args, "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
        check=False,
    )


def leftovers(state_dir: Path) -> list[str]:
    return [" ".join(p.cmdline()[:2]) for p in stray_processes(state_dir, EXECUTABLES)]


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A private state dir; whatever the test leaves running is stopped and reported."""
    path = tmp_path / "stack"
    yield path
    left = leftovers(path)
    dev(path, "down", "--purge")
    assert not left, f"the test left processes running: {left}"
    assert not leftovers(path)


def up_json(state_dir: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    result = dev(state_dir, "up", "--json", env=env)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"--json must print exactly one line: {result.stdout!r}"
    data = json.loads(lines[0])
    assert set(data) == CONTRACT_KEYS
    return data


def check_stack_answers(data: dict[str, str]) -> None:
    api = config.new_client_from_config(config_file=data["kubeconfig"])
    try:
        names = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    finally:
        api.close()
    assert {"default", "kube-system", "noderoll-system"} <= names
    with urllib.request.urlopen(data["temporal_ui"], timeout=10) as resp:
        assert resp.status == 200


def test_up_twice_reuses_and_down_leaves_nothing(state_dir: Path) -> None:
    first = up_json(state_dir)
    check_stack_answers(first)
    pids = {n: c.pid for n, c in load_stack_info(state_dir).components.items()}  # type: ignore[union-attr]
    assert set(pids) == set(EXECUTABLES)

    second = up_json(state_dir)
    assert second == first
    assert {n: c.pid for n, c in load_stack_info(state_dir).components.items()} == pids  # type: ignore[union-attr]

    status = dev(state_dir, "status")
    assert status.returncode == 0, status.stdout
    assert status.stdout.count("healthy") == len(EXECUTABLES)

    down = dev(state_dir, "down")
    assert down.returncode == 0, down.stderr
    assert leftovers(state_dir) == []
    assert load_stack_info(state_dir) is None
    # Data survives down/up: the CA (and so the kubeconfig's trust) is the same after a restart.
    ca = (state_dir / "pki" / "ca.crt").read_bytes()
    third = up_json(state_dir)
    check_stack_answers(third)
    assert (state_dir / "pki" / "ca.crt").read_bytes() == ca
    assert dev(state_dir, "status").returncode == 0

    purge = dev(state_dir, "down", "--purge")
    assert purge.returncode == 0, purge.stderr
    assert not state_dir.exists()
    stopped = dev(state_dir, "status")
    assert stopped.returncode == 1 and "stopped" in stopped.stdout


def test_taken_default_ports_are_replaced_by_free_ones(state_dir: Path) -> None:
    with ExitStack() as stack:
        for port in DEFAULT_PORTS:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            # As the servers do: without it a TIME_WAIT leftover of the stack before (its clients'
            # connections) fails this bind, the port looks held and is not, and the stack gets it.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen()
            except OSError:
                pass  # a listener holds it (another stack): just as good for this test
        data = up_json(state_dir)
        check_stack_answers(data)
        used = {p for c in load_stack_info(state_dir).components.values() for p in c.ports.values()}  # type: ignore[union-attr]
        assert not used & set(DEFAULT_PORTS), f"a taken default port was used: {used & set(DEFAULT_PORTS)}"
        assert not data["temporal_address"].endswith(":7233")
    assert dev(state_dir, "down").returncode == 0


def ports_of(state_dir: Path) -> set[int]:
    return {p for c in load_stack_info(state_dir).components.values() for p in c.ports.values()}  # type: ignore[union-attr]


def test_two_stacks_started_at_once_pick_different_ports(state_dir: Path, tmp_path: Path) -> None:
    # Ports are planned all at once but bound wave by wave, seconds apart: without the machine-wide
    # port lock both stacks plan the same free defaults and the later apiserver cannot bind.
    other = tmp_path / "other-stack"
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            answers = list(pool.map(up_json, [state_dir, other]))
        for data in answers:
            check_stack_answers(data)
        assert not ports_of(state_dir) & ports_of(other), ports_of(state_dir) & ports_of(other)
    finally:
        dev(other, "down", "--purge")
        assert not leftovers(other)
    assert dev(state_dir, "down").returncode == 0


def test_missing_binary_is_a_clear_error_and_starts_nothing(state_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    result = dev(state_dir, "up", env={K8S_BIN_DIR_ENV: str(empty)})
    assert result.returncode == 1
    message = result.stderr
    assert "kube-apiserver" in message and str(empty) in message and K8S_BIN_DIR_ENV in message
    assert "Traceback" not in message
    assert leftovers(state_dir) == []


def test_component_that_fails_is_named_with_its_log(state_dir: Path, tmp_path: Path) -> None:
    real = k8s_binaries(build=False)
    broken = tmp_path / "broken-bin"
    broken.mkdir()
    for name in ("kube-controller-manager", "kube-scheduler"):
        (broken / name).symlink_to(real / name)
    fake = broken / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho 'simulated apiserver failure' >&2\nexit 3\n")
    fake.chmod(0o755)

    result = dev(state_dir, "up", env={K8S_BIN_DIR_ENV: str(broken)})
    assert result.returncode == 1
    log = state_dir / "logs" / "kube-apiserver.log"
    assert "kube-apiserver exited" in result.stderr
    assert str(log) in result.stderr
    assert "simulated apiserver failure" in log.read_text()
    assert "Traceback" not in result.stderr
    # What did start (etcd, Temporal) is recorded, so `down` stops it.
    assert dev(state_dir, "down").returncode == 0
    assert leftovers(state_dir) == []
