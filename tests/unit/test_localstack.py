"""Local-stack logic that needs no running stack: binary lookup, connection defaults, ports, flags."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

from localstack import provision
from localstack.components import COMPONENTS, Binaries, StackLayout
from localstack.pki import Pki
from localstack.processes import pick_port
from localstack.state import ComponentInfo, StackInfo, load_stack_info, resolve_connection, save_stack_info
from tests.helpers import (
    EventuallyTimeout,
    assert_eventually,
    assert_eventually_async,
    new_task_queue,
    unique_name,
)


def _fake_binaries(folder: Path, stamp: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in provision.K8S_BINARIES:
        path = folder / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    if stamp is not None:
        (folder / provision.BUILD_STAMP).write_text(stamp)
    return folder


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No binary-location variables from the caller; an empty private cache."""
    for var in (provision.K8S_BIN_DIR_ENV, provision.KUBEBUILDER_ASSETS_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(provision.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path


class TestK8sBinaryLookup:
    def test_kubebuilder_assets_first(self, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        assets = _fake_binaries(clean_env / "assets")
        _fake_binaries(provision.k8s_cache_dir(), provision.build_revision())
        monkeypatch.setenv(provision.KUBEBUILDER_ASSETS_ENV, str(assets))
        assert provision.find_k8s_binaries() == assets

    def test_incomplete_kubebuilder_assets_falls_back_to_the_cache(
        self, clean_env: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (clean_env / "empty").mkdir()
        cache = _fake_binaries(provision.k8s_cache_dir(), provision.build_revision())
        monkeypatch.setenv(provision.KUBEBUILDER_ASSETS_ENV, str(clean_env / "empty"))
        assert provision.find_k8s_binaries() == cache

    def test_cache_of_an_older_build_revision_is_not_used(self, clean_env: Path) -> None:
        _fake_binaries(provision.k8s_cache_dir(), stamp="0")
        assert provision.find_k8s_binaries() is None
        with pytest.raises(provision.ProvisionError, match="scripts/bootstrap"):
            provision.k8s_binaries(build=False)

    def test_pinned_folder_never_falls_back(self, clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        _fake_binaries(provision.k8s_cache_dir(), provision.build_revision())
        pinned = clean_env / "pinned"
        pinned.mkdir()
        (pinned / "kube-apiserver").write_text("")
        monkeypatch.setenv(provision.K8S_BIN_DIR_ENV, str(pinned))
        with pytest.raises(provision.ProvisionError) as err:
            provision.find_k8s_binaries()
        assert "kube-apiserver, kube-controller-manager, kube-scheduler" in str(err.value)
        assert provision.K8S_BIN_DIR_ENV in str(err.value)

    def test_build_revision_comes_from_the_build_script(self) -> None:
        assert provision.build_revision() is not None


class TestConnectionDefaults:
    @pytest.fixture
    def running_stack(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        monkeypatch.delenv("NODEROLL_TEMPORAL_ADDRESS", raising=False)
        monkeypatch.delenv("KUBECONFIG", raising=False)
        import psutil

        me = psutil.Process()
        info = StackInfo("127.0.0.1:17233", "http://127.0.0.1:18233", str(tmp_path / "kc"), str(tmp_path))
        # This very process stands in for a running component.
        info.components["temporal"] = ComponentInfo("temporal", me.pid, me.create_time(), {"frontend": 1}, "log")
        save_stack_info(info)
        return tmp_path

    def test_stack_fills_what_is_missing(self, running_stack: Path) -> None:
        conn = resolve_connection(state_dir=running_stack)
        assert (conn.temporal_address, conn.kubeconfig) == ("127.0.0.1:17233", str(running_stack / "kc"))
        assert str(running_stack) in conn.source

    def test_flags_beat_environment_beat_stack(self, running_stack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NODEROLL_TEMPORAL_ADDRESS", "env:1")
        conn = resolve_connection(kubeconfig="/flag/kc", state_dir=running_stack)
        assert (conn.temporal_address, conn.kubeconfig) == ("env:1", "/flag/kc")
        assert resolve_connection("flag:2", state_dir=running_stack).temporal_address == "flag:2"

    def test_dead_stack_is_ignored(self, running_stack: Path) -> None:
        info = load_stack_info(running_stack)
        assert info is not None
        info.components["temporal"].create_time -= 1000  # as if the pid had been recycled
        save_stack_info(info)
        assert resolve_connection(state_dir=running_stack).temporal_address is None

    def test_garbage_stack_file_is_no_stack(self, tmp_path: Path) -> None:
        (tmp_path / "stack.json").write_text("{not json")
        assert load_stack_info(tmp_path) is None


def test_pick_port_skips_taken_ones() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken: set[int] = set()
        chosen = pick_port([port], taken)
        assert chosen != port and chosen in taken
        assert pick_port([chosen, None], taken) != chosen


def test_control_plane_flags(tmp_path: Path) -> None:
    ports = {c.name: {k: 1000 + i for i, k in enumerate(c.default_ports)} for c in COMPONENTS}
    layout = StackLayout(Binaries(Path("etcd"), Path("/k8s"), Path("temporal")), tmp_path, Pki(tmp_path), ports)
    argv = {c.name: c.argv(layout) for c in COMPONENTS}
    assert "--authorization-mode=Node,RBAC" in argv["kube-apiserver"]
    cm = argv["kube-controller-manager"]
    assert "--node-monitor-grace-period=300s" in cm and "--use-service-account-credentials=true" in cm
    assert any(a.startswith("--service-account-private-key-file=") for a in cm)
    assert any(a.startswith("--root-ca-file=") for a in cm)
    temporal = argv["temporal"]
    for name, kind in (("NoderollPackage", "KeywordList"), ("NoderollNode", "Keyword"), ("NoderollPhase", "Keyword")):
        assert f"--search-attribute={name}={kind}" in temporal
    assert f"--db-filename={tmp_path / 'data' / 'temporal.db'}" in temporal


class TestHelpers:
    def test_unique_names_are_dns_labels(self) -> None:
        names = {unique_name("Some_Prefix.With Junk") for _ in range(50)}
        assert len(names) == 50
        for name in names:
            assert len(name) <= 63 and name.replace("-", "").isalnum() and name == name.lower()
        assert new_task_queue() != new_task_queue()

    def test_assert_eventually_returns_the_value(self) -> None:
        calls = iter([False, False, "ok"])
        assert assert_eventually(lambda: next(calls), timeout=1, interval=0.001) == "ok"

    def test_assert_eventually_times_out_with_the_last_error(self) -> None:
        def never() -> None:
            raise AssertionError("still pending")

        with pytest.raises(EventuallyTimeout, match="still pending"):
            assert_eventually(never, timeout=0.05, interval=0.01)

    @pytest.mark.parametrize("falsy", [None, False, [], {}, 0, ""],
                             ids=["none", "false", "empty-list", "empty-dict", "zero", "empty-string"])
    def test_assert_eventually_keeps_waiting_through_a_falsy_result(self, falsy: object) -> None:
        calls = iter([falsy, falsy, ["pod-a"]])
        assert assert_eventually(lambda: next(calls), timeout=1, interval=0.001) == ["pod-a"]

    @pytest.mark.parametrize("falsy", [None, []], ids=["none", "empty-list"])
    def test_assert_eventually_times_out_naming_a_falsy_last_result(self, falsy: object) -> None:
        with pytest.raises(EventuallyTimeout, match=re.escape(f"(last result: {falsy!r})")):
            assert_eventually(lambda: falsy, timeout=0.05, interval=0.01)

    def test_a_function_that_only_asserts_is_not_done(self) -> None:
        state = {"ready": True}

        def only_asserts() -> None:
            assert state["ready"]  # holds, and the function returns None: not a result

        with pytest.raises(EventuallyTimeout, match=re.escape("(last result: None)")):
            assert_eventually(only_asserts, timeout=0.05, interval=0.01)

    def test_assert_eventually_returns_a_truthy_result_at_once(self) -> None:
        calls: list[int] = []

        def probe() -> dict[str, str]:
            calls.append(1)
            return {"phase": "Complete"}

        started = time.monotonic()
        # An interval longer than the test's budget: a second call would show as a 30 s wait.
        assert assert_eventually(probe, timeout=60, interval=30) == {"phase": "Complete"}
        assert calls == [1] and time.monotonic() - started < 1

    async def test_assert_eventually_async_keeps_waiting_through_none_and_empty(self) -> None:
        answers = iter([None, [], ["pod-a"]])

        async def probe() -> list[str] | None:
            return next(answers)

        assert await assert_eventually_async(probe, timeout=1, interval=0.001) == ["pod-a"]

    @pytest.mark.parametrize("falsy", [None, []], ids=["none", "empty-list"])
    async def test_assert_eventually_async_times_out_naming_a_falsy_last_result(self, falsy: object) -> None:
        async def probe() -> object:
            return falsy

        with pytest.raises(EventuallyTimeout, match=re.escape(f"(last result: {falsy!r})")):
            await assert_eventually_async(probe, timeout=0.05, interval=0.01)

    async def test_assert_eventually_async_returns_a_truthy_result_at_once(self) -> None:
        calls: list[int] = []

        async def probe() -> bool:
            calls.append(1)
            return True

        started = time.monotonic()
        assert await assert_eventually_async(probe, timeout=60, interval=30) is True
        assert calls == [1] and time.monotonic() - started < 1
