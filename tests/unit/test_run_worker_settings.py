"""`noderoll worker` settings: flags, then environment variables, then a running dev stack."""

from __future__ import annotations

from pathlib import Path

import pytest

import kube
from cli.main import build_parser
from service.connection import ACTIVITY_THREADS, STICKY_SCHEDULE_TO_START_SECONDS, settings_from_args
from worker.tuning import polling, sticky_schedule_to_start_from_env


def test_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEROLL_TEMPORAL_ADDRESS", "env:7233")
    args = build_parser().parse_args(["worker", "--temporal-address", "flag:7233", "--kubeconfig", "/k",
                                      "--task-queue", "q", "--temporal-namespace", "ns", "--metrics-port", "9100"])
    settings = settings_from_args(args)
    assert (settings.temporal_address, settings.kubeconfig, settings.task_queue, settings.namespace,
            settings.metrics_port) == ("flag:7233", "/k", "q", "ns", 9100)


def test_environment_fills_what_flags_leave_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NODEROLL_TEMPORAL_ADDRESS", "env:7233")
    monkeypatch.setenv("KUBECONFIG", "/env/kubeconfig")
    monkeypatch.setenv("NODEROLL_TASK_QUEUE", "env-queue")
    monkeypatch.setenv("NODEROLL_METRICS_PORT", "9200")
    settings = settings_from_args(build_parser().parse_args(["worker"]))
    assert (settings.temporal_address, settings.kubeconfig, settings.task_queue, settings.metrics_port) == (
        "env:7233", "/env/kubeconfig", "env-queue", 9200)
    assert settings.namespace == "default"


def test_no_address_anywhere_exits_with_a_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NODEROLL_TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("NODEROLL_STATE_DIR", str(tmp_path))  # no stack.json there
    with pytest.raises(SystemExit, match="noderoll dev up"):
        settings_from_args(build_parser().parse_args(["worker"]))


def test_activity_slots_default_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEROLL_TEMPORAL_ADDRESS", "env:7233")
    monkeypatch.delenv("NODEROLL_MAX_CONCURRENT_ACTIVITIES", raising=False)
    assert settings_from_args(build_parser().parse_args(["worker"])).max_concurrent_activities == ACTIVITY_THREADS
    flagged = build_parser().parse_args(["worker", "--max-concurrent-activities", "64"])
    assert settings_from_args(flagged).max_concurrent_activities == 64
    monkeypatch.setenv("NODEROLL_MAX_CONCURRENT_ACTIVITIES", "500")
    assert settings_from_args(build_parser().parse_args(["worker"])).max_concurrent_activities == 500


def test_workflow_task_pollers_default_flag_environment_and_bad_values(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NODEROLL_TEMPORAL_ADDRESS", "env:7233")
    monkeypatch.delenv("NODEROLL_WORKFLOW_TASK_POLLERS", raising=False)
    default = settings_from_args(build_parser().parse_args(["worker"]))
    assert default.workflow_task_pollers is None and polling(None) == {}  # the SDK's polling
    flagged = settings_from_args(build_parser().parse_args(["worker", "--workflow-task-pollers", "20"]))
    assert flagged.workflow_task_pollers == 20
    # The SDK's default gives ONE poll to the task queue where every new node window's first task
    # waits; the flag gives it half of them.
    options = polling(flagged.workflow_task_pollers)
    nonsticky = int(options["workflow_task_poller_behavior"].maximum * options["nonsticky_to_sticky_poll_ratio"])
    assert nonsticky == 10
    monkeypatch.setenv("NODEROLL_WORKFLOW_TASK_POLLERS", "16")
    assert settings_from_args(build_parser().parse_args(["worker"])).workflow_task_pollers == 16
    for bad, message in (("1", "1 is too few: at least 2"), ("many", "'many' is not a whole number")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["worker", "--workflow-task-pollers", bad])
        assert message in capsys.readouterr().err
    monkeypatch.setenv("NODEROLL_WORKFLOW_TASK_POLLERS", "0")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker"])
    assert "0 is too few" in capsys.readouterr().err


def test_sticky_schedule_to_start_default_flag_environment_and_bad_values(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NODEROLL_TEMPORAL_ADDRESS", "env:7233")
    monkeypatch.delenv("NODEROLL_STICKY_SCHEDULE_TO_START", raising=False)
    default = settings_from_args(build_parser().parse_args(["worker"]))
    assert default.sticky_schedule_to_start_seconds == STICKY_SCHEDULE_TO_START_SECONDS
    flagged = build_parser().parse_args(["worker", "--sticky-schedule-to-start", "45"])
    assert settings_from_args(flagged).sticky_schedule_to_start_seconds == 45.0
    monkeypatch.setenv("NODEROLL_STICKY_SCHEDULE_TO_START", "2.5")
    assert settings_from_args(build_parser().parse_args(["worker"])).sticky_schedule_to_start_seconds == 2.5
    assert sticky_schedule_to_start_from_env() == 2.5  # what the bench records
    for bad, message in (("0", "0 seconds is out of range"), ("3601", "3601 seconds is out of range"),
                         ("soon", "'soon' is not a number of seconds")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["worker", "--sticky-schedule-to-start", bad])
        assert message in capsys.readouterr().err
    monkeypatch.setenv("NODEROLL_STICKY_SCHEDULE_TO_START", "-1")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker"])
    assert "-1 seconds is out of range" in capsys.readouterr().err
    assert build_parser().parse_args(["bridge"]).func  # only the worker reads it
    with pytest.raises(SystemExit, match="NODEROLL_STICKY_SCHEDULE_TO_START: -1 seconds is out of range"):
        sticky_schedule_to_start_from_env()


def test_the_kubernetes_pool_is_sized_to_the_activity_slots(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
    try:
        kube.configure(str(kubeconfig), pool_size=ACTIVITY_THREADS + kube.POOL_SPARE)
        assert kube.api_client().configuration.connection_pool_maxsize == ACTIVITY_THREADS + kube.POOL_SPARE
        assert kube.api_client().rest_client.pool_manager.connection_pool_kw["maxsize"] == 264
    finally:
        kube.configure(None)


def test_prometheus_address_from_flag_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--prometheus-address` (env NODEROLL_PROMETHEUS_ADDRESS): what analysis gates query without their own."""
    from activities import prometheus

    monkeypatch.setenv("NODEROLL_PROMETHEUS_ADDRESS", "http://env-prom:9090")
    assert build_parser().parse_args(["worker"]).prometheus_address == "http://env-prom:9090"
    args = build_parser().parse_args(["worker", "--prometheus-address", "https://flag-prom/prefix"])
    assert args.prometheus_address == "https://flag-prom/prefix"
    before = prometheus.configured_address()
    try:
        prometheus.configure(args.prometheus_address)
        assert prometheus.configured_address() == "https://flag-prom/prefix"
        prometheus.configure(None)  # no flag: the environment's value stays
        assert prometheus.configured_address() == "https://flag-prom/prefix"
    finally:
        prometheus.configure(before)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "--prometheus-address", "prom:9090"])
