"""`noderoll bridge` flags: the worker's connection settings plus resync, shard and leader election."""

from __future__ import annotations

import pytest

from cli.main import build_parser
from crd_bridge.command import options_from_args, settings_from_args


def test_connection_is_resolved_like_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEROLL_TEMPORAL_ADDRESS", "env:7233")
    monkeypatch.setenv("NODEROLL_TASK_QUEUE", "env-queue")
    monkeypatch.setenv("NODEROLL_METRICS_PORT", "9300")
    settings = settings_from_args(build_parser().parse_args(["bridge", "--kubeconfig", "/k"]))
    assert (settings.temporal_address, settings.task_queue, settings.kubeconfig, settings.metrics_port) == (
        "env:7233", "env-queue", "/k", 9300)


def test_defaults_lead_on_the_contract_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEROLL_LEASE_NAMESPACE", raising=False)
    monkeypatch.delenv("NODEROLL_RESYNC_SECONDS", raising=False)
    options = options_from_args(build_parser().parse_args(["bridge"]))
    assert options.lease is not None
    assert (options.lease.namespace, options.lease.name) == ("noderoll-system", "noderoll-bridge")
    assert options.resync_seconds == 30.0 and options.label_selector == ""


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEROLL_LEASE_NAMESPACE", "noderoll")
    args = build_parser().parse_args(["bridge", "--resync-seconds", "5", "--label-selector", "shard=a",
                                      "--identity", "me"])
    options = options_from_args(args)
    assert options.lease is not None and (options.lease.namespace, options.lease.identity) == ("noderoll", "me")
    assert (options.resync_seconds, options.label_selector) == (5.0, "shard=a")
    assert options_from_args(build_parser().parse_args(["bridge", "--no-leader-election"])).lease is None


def test_fleet_relist_and_watchdog_flags_environment_and_bad_values(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NODEROLL_FLEET_RELIST_MIN_SECONDS", raising=False)
    assert options_from_args(build_parser().parse_args(["bridge"])).fleet_relist_min_seconds == 30
    monkeypatch.setenv("NODEROLL_FLEET_RELIST_MIN_SECONDS", "7")
    assert options_from_args(build_parser().parse_args(["bridge"])).fleet_relist_min_seconds == 7
    args = build_parser().parse_args(["bridge", "--fleet-relist-min-seconds", "5"])
    assert options_from_args(args).fleet_relist_min_seconds == 5
    for bad, said in (("0", "0 must be at least 1 second"), ("soon", "'soon' is not a whole number of seconds")):
        for flag in ("--fleet-relist-min-seconds", "--fleet-watchdog-seconds"):
            with pytest.raises(SystemExit):
                build_parser().parse_args(["bridge", flag, bad])
            assert f"argument {flag}: {said}" in capsys.readouterr().err
    monkeypatch.delenv("NODEROLL_FLEET_WATCHDOG_SECONDS", raising=False)
    assert options_from_args(build_parser().parse_args(["bridge"])).fleet_watchdog_seconds == 60
    monkeypatch.setenv("NODEROLL_FLEET_WATCHDOG_SECONDS", "20")
    assert options_from_args(build_parser().parse_args(["bridge"])).fleet_watchdog_seconds == 20
    args = build_parser().parse_args(["bridge", "--fleet-watchdog-seconds", "15"])
    assert options_from_args(args).fleet_watchdog_seconds == 15
