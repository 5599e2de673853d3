"""`noderoll worker` settings: flags, then environment variables, then a running dev stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.cli import build_parser
from worker.run_worker import settings_from_args


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
