"""The field converters of `noderoll import` (api/nodewright_fields.py, nodewright_interrupts.py,
nodewright_policy.py), one table per NodeWright field: input -> noderoll value and notes."""

from __future__ import annotations

from typing import Any

import pytest

from api.nodewright_fields import Notes, Severity, Unmappable, env, image_reference, resources, split_image
from api.nodewright_interrupts import config_interrupts, drain, go_duration_seconds, go_glob_regex, interrupt
from api.nodewright_policy import WHOLE_BUDGET_BATCH, budget_policy, compartments, policy_spec, strategy
from api.policy import DeploymentPolicySpec

SHA = "sha256:" + "ab" * 32


def new_notes() -> Notes:
    return Notes(0, "Skyhook", "foo")


def fields(notes: Notes) -> list[tuple[str, Severity]]:
    return [(n.field, n.severity) for n in notes.out]


@pytest.mark.parametrize(
    ("image", "sha", "expected", "noted"),
    [
        ("ghcr.io/nvidia/shellscript", None, "ghcr.io/nvidia/shellscript:1.2.3", []),
        ("ghcr.io/nvidia/shellscript:bogus", None, "ghcr.io/nvidia/shellscript:1.2.3", ["p.image"]),
        ("localhost:5000/org/pkg", None, "localhost:5000/org/pkg:1.2.3", []),
        ("localhost:5000/org/pkg:old", None, "localhost:5000/org/pkg:1.2.3", ["p.image"]),
        ("alpine", SHA, f"alpine@{SHA}", []),
        ("alpine:3.21", SHA, f"alpine@{SHA}", ["p.image"]),
        (f"alpine@{SHA}", None, f"alpine@{SHA}", ["p.image"]),
    ],
)
def test_image_is_pulled_by_version_or_digest(image: str, sha: str | None, expected: str, noted: list[str]) -> None:
    notes = new_notes()
    package = {"image": image} | ({"containerSHA": sha} if sha else {})
    assert image_reference(package, "1.2.3", "p", notes) == expected
    assert [n.field for n in notes.out] == noted


def test_split_image_reads_registry_ports() -> None:
    assert split_image("host:5000/a/b:1.0@sha256:x") == ("host:5000/a/b", "1.0", "sha256:x")
    assert split_image("host:5000/a/b") == ("host:5000/a/b", None, None)


@pytest.mark.parametrize(
    ("value", "expected", "noted"),
    [
        ({"type": "reboot"}, {"type": "reboot"}, []),
        ({"type": "service", "services": ["cron", "containerd", "cron"]},
         {"type": "service", "services": ["cron", "containerd"]}, []),
        ({"type": "restartAllServices"}, {"type": "restartAllServices"}, []),
        ({"type": "noop"}, {"type": "noop"}, []),
        ({"type": "reboot", "services": ["containerd"]}, {"type": "reboot"}, [("i.services", Severity.NOT_CARRIED)]),
        ({"type": "service"}, {"type": "noop"}, [("i", Severity.NOT_CARRIED)]),
        ({"type": "node_restart"}, {"type": "reboot"}, []),
        ({"type": "restart_all_services"}, {"type": "restartAllServices"}, []),
        ({"type": "reboot", "delay": 5}, {"type": "reboot"}, [("i.delay", Severity.NOT_CARRIED)]),
        (None, None, []),
    ],
)
def test_interrupts(value: Any, expected: Any, noted: list[Any]) -> None:
    notes = new_notes()
    assert interrupt(value, "i", notes) == expected
    assert fields(notes) == noted


@pytest.mark.parametrize("value", [{"type": "kexec"}, {"type": None}, {"services": ["x"]}, "reboot",
                                   {"type": "service", "services": "containerd"}])
def test_interrupts_that_cannot_be_guessed(value: Any) -> None:
    with pytest.raises(Unmappable):
        interrupt(value, "i", new_notes())


@pytest.mark.parametrize(
    ("pattern", "keys", "expected"),
    [
        ("*.conf", ["a.conf", "b.txt"], {"*.conf": {"type": "reboot"}}),
        ("a?.conf", ["a1.conf"], {"a?.conf": {"type": "reboot"}}),
        ("[ab].conf", ["a.conf", "b.conf", "c.conf"], {"a.conf": {"type": "reboot"}, "b.conf": {"type": "reboot"}}),
        ("[^a].conf", ["a.conf", "b.conf"], {"b.conf": {"type": "reboot"}}),
        ("[a-c]x", ["ax", "dx"], {"ax": {"type": "reboot"}}),
        ("a\\.conf", ["a.conf"], {"a.conf": {"type": "reboot"}}),
        ("[ab", ["a"], {}),
        ("nothing.conf", ["a.conf"], {}),
    ],
)
def test_config_interrupt_globs(pattern: str, keys: list[str], expected: dict[str, Any]) -> None:
    config = {key: "x" for key in keys}
    assert config_interrupts({pattern: {"type": "reboot"}}, config, "ci", new_notes()) == expected


def test_config_interrupts_expanded_onto_one_key_merge_like_a_node() -> None:
    value = {"[a]": {"type": "service", "services": ["x"]}, "a": {"type": "service", "services": ["y"]}}
    assert config_interrupts(value, {"a": ""}, "ci", new_notes()) == {"a": {"type": "service", "services": ["x", "y"]}}
    value = {"[a]": {"type": "reboot"}, "a": {"type": "service", "services": ["y"]}}
    assert config_interrupts(value, {"a": ""}, "ci", new_notes()) == {"a": {"type": "reboot"}}


def test_go_globs_match_like_filepath_match() -> None:
    regex = go_glob_regex("*.c?nf")
    assert regex is not None and regex.match("x.conf") and not regex.match("x.conf2")
    assert go_glob_regex("\\") is None and go_glob_regex("[]") is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("1h30m", 5400), ("2.5m", 150), ("500ms", 0.5), ("0", 0), ("1h0m0s", 3600), ("-5s", -5),
     ("15", None), ("abc", None), ("", None), (30, None), (True, None)],
)
def test_go_durations(text: Any, seconds: float | None) -> None:
    assert go_duration_seconds(text) == seconds


@pytest.mark.parametrize(
    ("value", "expected", "noted"),
    [
        (None, {"deleteEmptyDirData": True}, []),
        ({"timeout": "10m", "gracePeriod": "1.5s"}, {"deleteEmptyDirData": True, "timeoutSeconds": 600,
                                                     "gracePeriodSeconds": 2}, []),
        ({"timeout": "500ms"}, {"deleteEmptyDirData": True, "timeoutSeconds": 1}, []),
        ({"deleteEmptyDirData": False}, {"deleteEmptyDirData": False}, []),
        ({"timeout": "0s"}, {"deleteEmptyDirData": True}, ["d.timeout"]),
        ({"timeout": "ten"}, {"deleteEmptyDirData": True}, ["d.timeout"]),
        ({"gracePeriod": "-1s"}, {"deleteEmptyDirData": True}, ["d.gracePeriod"]),
        ({"disableEviction": True, "force": False, "ignoreDaemonSets": False}, {"deleteEmptyDirData": True},
         ["d.disableEviction", "d.force", "d.ignoreDaemonSets"]),
        ({"disableEviction": False, "force": True, "ignoreDaemonSets": True}, {"deleteEmptyDirData": True}, []),
    ],
)
def test_drain_config(value: Any, expected: dict[str, Any], noted: list[str]) -> None:
    notes = new_notes()
    assert drain(value, "d", notes) == expected
    assert [n.field for n in notes.out] == noted


@pytest.mark.parametrize(
    ("value", "expected", "noted"),
    [
        ([{"name": "A", "value": "1"}, {"name": "B"}], [{"name": "A", "value": "1"}, {"name": "B", "value": ""}], []),
        ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], [{"name": "A", "value": "2"}], ["e[0]"]),
        ([{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}], [], ["e[0].valueFrom"]),
        ([{"name": "A", "value": 5}], [], ["e[0].value"]),
        ([{"name": "has space", "value": "x"}, "text"], [], ["e[0]", "e[1]"]),
    ],
)
def test_env(value: Any, expected: list[Any], noted: list[str]) -> None:
    notes = new_notes()
    assert env(value, "e", notes) == expected
    assert [n.field for n in notes.out] == noted


@pytest.mark.parametrize(
    ("value", "expected", "noted"),
    [
        ({"cpuRequest": "100m", "cpuLimit": "1", "memoryRequest": "64Mi", "memoryLimit": "1Gi"},
         {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, []),
        ({"cpuRequest": "100m"}, {"requests": {"cpu": "100m"}}, []),
        ({"cpuRequest": "2", "cpuLimit": "1"}, {"requests": {"cpu": "2"}}, ["r.cpuLimit"]),
        ({"memoryRequest": "lots", "memoryLimit": "0"}, None, ["r.memoryRequest", "r.memoryLimit"]),
        ({"gpu": "1"}, None, ["r.gpu"]),
    ],
)
def test_resources(value: Any, expected: Any, noted: list[str]) -> None:
    notes = new_notes()
    assert resources(value, "r", notes) == expected
    assert [n.field for n in notes.out] == noted


@pytest.mark.parametrize(
    ("value", "expected", "noted"),
    [
        ({"count": 3}, {"count": 3}, 3),
        ({"percent": 30}, {"percent": 30}, WHOLE_BUDGET_BATCH),
        ({"count": 0}, {"count": 1}, 1),
        ({"percent": 0}, {"count": 1}, 1),
        ({"count": 2, "percent": 50}, {"count": 2}, 2),
    ],
)
def test_interruption_budget_becomes_a_fixed_policy(value: dict[str, int], expected: dict[str, int], noted: int) -> None:
    spec = budget_policy(value, "b", new_notes())
    assert spec == {"default": {"budget": expected, "strategy": {"type": "fixed", "initialBatch": noted}}}
    DeploymentPolicySpec.model_validate(spec)


def test_interruption_budget_unset_or_wrong() -> None:
    assert budget_policy({}, "b", new_notes()) is None
    assert budget_policy(None, "b", new_notes()) is None
    for bad in ({"percent": 150}, {"count": "3"}, {"count": True}):
        with pytest.raises(Unmappable):
            budget_policy(bad, "b", new_notes())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"fixed": {}}, {"type": "fixed"}),
        ({"fixed": {"initialBatch": 3, "batchThreshold": 80, "failureThreshold": 2, "safetyLimit": 10}},
         {"type": "fixed", "initialBatch": 3, "batchThreshold": 80, "failureThreshold": 2, "safetyLimit": 10}),
        ({"linear": {"initialBatch": 1, "delta": 4}}, {"type": "linear", "initialBatch": 1, "delta": 4}),
        ({"exponential": {"growthFactor": 3, "safetyLimit": 100}},
         {"type": "exponential", "growthFactor": 3, "safetyLimit": 100}),
        ({"fixed": {"initialBatch": 2}, "linear": None}, {"type": "fixed", "initialBatch": 2}),
    ],
)
def test_strategies(value: dict[str, Any], expected: dict[str, Any]) -> None:
    assert strategy(value, "s", new_notes()) == expected


def test_strategies_that_nodewright_refuses() -> None:
    for bad in ({}, {"fixed": {}, "linear": {}}, {"fixed": {"initialBatch": "2"}}, "fixed"):
        with pytest.raises(Unmappable):
            strategy(bad, "s", new_notes())
    notes = new_notes()
    assert strategy({"fixed": {"delta": 2}, "canary": {}}, "s", notes) == {"type": "fixed"}
    assert fields(notes) == [("s.canary", Severity.NOT_CARRIED), ("s.fixed.delta", Severity.NOT_CARRIED)]


def test_compartment_names_become_dns_labels() -> None:
    notes = new_notes()
    value = [{"name": "Prod_Zone A", "selector": {"matchLabels": {"z": "a"}}, "budget": {"count": 1}},
             {"name": "lab", "budget": {"percent": 5}}]
    assert compartments(value, "c", notes) == [
        {"name": "prod-zone-a", "selector": {"matchLabels": {"z": "a"}}, "budget": {"count": 1}},
        {"name": "lab", "selector": {}, "budget": {"percent": 5}},
    ]
    assert fields(notes) == [("c[0].name", Severity.NOT_CARRIED)]
    for bad in ([{"name": "__default__", "budget": {"count": 1}}],
                [{"name": "A", "budget": {"count": 1}}, {"name": "a", "budget": {"count": 1}}],
                [{"budget": {"count": 1}}], [{"name": "x", "budget": {"count": 1, "percent": 2}}]):
        with pytest.raises(Unmappable):
            compartments(bad, "c", new_notes())


def test_policy_without_default_strategy_or_with_invalid_compartments() -> None:
    notes = new_notes()
    assert policy_spec({"default": {"budget": {"count": 1}}}, "spec", notes) == {"default": {"budget": {"count": 1}}}
    assert fields(notes) == [("spec.default.strategy", Severity.NOT_CARRIED)]
    same_selector = {"default": {"budget": {"count": 1}}, "compartments": [
        {"name": "a", "selector": {"matchLabels": {"x": "1"}}, "budget": {"count": 1}},
        {"name": "b", "selector": {"matchLabels": {"x": "1"}}, "budget": {"count": 1}}]}
    with pytest.raises(Unmappable, match="the same selector as a"):
        policy_spec(same_selector, "spec", new_notes())
    with pytest.raises(Unmappable, match="needs its default budget"):
        policy_spec({}, "spec", new_notes())
