"""Injected faults: which node/mode misbehaves and how. Pure (parsing and matching; reads a file).

Kinds: `fail-stage` (the stage pod fails with `exitCode` without running the agent), `hang` (the
stage pod stays Running until deleted; mode `verify`: the GPU verify pod), `reboot-never-returns` (a
rebooted node stays NotReady), `slow-termination` (deleted pods take `seconds`, still bounded by
their grace period) and `unhealthy-gpus` (the node's simulated GPUs fail a window's GPU verify with
`exitCode`: fleetsim/verify.py). `nodes` is a
regular expression matched against the whole node name; `mode`, `package` and `version` (the stage
pod's Package version, so a fault can hit one version of a Package and spare the others) are shell patterns;
`times` limits how many matches a fault applies to (then it is spent).
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KINDS = ("fail-stage", "hang", "reboot-never-returns", "slow-termination", "unhealthy-gpus")


@dataclass
class Fault:
    """One fault rule."""

    kind: str
    nodes: str = ".*"
    mode: str = "*"
    package: str = "*"
    version: str = "*"
    exit_code: int = 1
    seconds: float = 0.0
    times: int | None = None
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(KINDS)}")
        self._pattern = re.compile(self.nodes)

    def matches(self, node: str, mode: str = "", package: str = "", version: str = "") -> bool:
        """Whether the rule covers this node (and stage pod mode/package/version)."""
        if self.times is not None and self.times <= 0:
            return False
        return (
            self._pattern.fullmatch(node) is not None
            and fnmatch.fnmatchcase(mode, self.mode)
            and fnmatch.fnmatchcase(package, self.package)
            and fnmatch.fnmatchcase(version, self.version)
        )


class Faults:
    """The active fault rules; thread-safe, mutable at run time (tests add rules to a running fleet)."""

    def __init__(self, rules: list[Fault] | None = None) -> None:
        self._rules = list(rules or [])
        self._lock = threading.Lock()

    def add(self, rule: Fault) -> None:
        """Add a rule (takes effect for the next matching event)."""
        with self._lock:
            self._rules.append(rule)

    def replace(self, rules: list[Fault]) -> None:
        """Replace every rule (a reloaded faults file)."""
        with self._lock:
            self._rules = list(rules)

    def take(self, kind: str, node: str, mode: str = "", package: str = "", version: str = "") -> Fault | None:
        """The first matching rule of a kind, spending one of its `times`."""
        with self._lock:
            for rule in self._rules:
                if rule.kind == kind and rule.matches(node, mode, package, version):
                    if rule.times is not None:
                        rule.times -= 1
                    return rule
        return None


def _rule(raw: Any) -> Fault:
    if not isinstance(raw, dict) or "kind" not in raw:
        raise ValueError(f"a fault must be a mapping with a kind: {raw!r}")
    return Fault(
        kind=str(raw["kind"]),
        nodes=str(raw.get("nodes", ".*")),
        mode=str(raw.get("mode", "*")),
        package=str(raw.get("package", "*")),
        version=str(raw.get("version", "*")),
        exit_code=int(raw.get("exitCode", 1)),
        seconds=float(raw.get("seconds", 0)),
        times=int(raw["times"]) if raw.get("times") is not None else None,
    )


def parse_faults(document: Any) -> list[Fault]:
    """Rules from a decoded YAML/JSON document: `{"faults": [...]}` or a bare list."""
    items = document.get("faults", []) if isinstance(document, dict) else document
    if not isinstance(items, list):
        raise ValueError("faults must be a list")
    return [_rule(item) for item in items]


def load_faults_file(path: Path) -> list[Fault]:
    """Read a faults file (YAML or JSON)."""
    text = path.read_text(encoding="utf-8")
    document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    return parse_faults(document or [])


def parse_flag(kind: str, value: str) -> Fault:
    """A rule from a command-line flag.

    `--fail-stage REGEX:MODE[:CODE]`, `--hang-stage REGEX:MODE`, `--reboot-never-returns REGEX`,
    `--slow-termination REGEX:SECONDS`, `--unhealthy-gpus REGEX[:CODE]`. The regex is everything before the first field separator
    that follows it, so keep `:` out of node regexes.
    """
    parts = value.split(":")
    if kind == "fail-stage" and len(parts) in (2, 3):
        return Fault(kind, nodes=parts[0], mode=parts[1], exit_code=int(parts[2]) if len(parts) == 3 else 1)
    if kind == "hang" and len(parts) == 2:
        return Fault(kind, nodes=parts[0], mode=parts[1])
    if kind == "reboot-never-returns" and len(parts) == 1:
        return Fault(kind, nodes=parts[0])
    if kind == "slow-termination" and len(parts) == 2:
        return Fault(kind, nodes=parts[0], seconds=float(parts[1]))
    if kind == "unhealthy-gpus" and len(parts) in (1, 2):
        return Fault(kind, nodes=parts[0], exit_code=int(parts[1]) if len(parts) == 2 else 1)
    raise ValueError(f"cannot parse --{kind} {value!r}")
