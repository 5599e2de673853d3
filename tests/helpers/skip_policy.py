"""The suite's skip policy: a skip outside the Docker tier fails the run. A pytest plugin; no I/O.

Why (issue #24, item 6): a clean-clone run of `scripts/test` once reported two skips more than the
runs before it, and nothing said which tests or why; a missing Prometheus, Helm or kubelet can hide
a whole tier that way. So `scripts/test` prints every skip's reason (`-rfEs`), and this plugin turns
the exit status of a run that otherwise passed into 1 when a test was skipped outside the Docker
tier (`tests/docker`, marker `docker`: no Docker engine runs on the test bed, DESIGN.md), naming
each such skip and its reason. `NODEROLL_ALLOW_SKIPS=1` (also `true`, `yes`) allows them: the run
then passes and still lists them.

pytest-xdist: the test processes report every test (and every skipped or failed collection) to the
controller, which calls `pytest_runtest_logreport` / `pytest_collectreport` with each report, so the
skips are collected there; the controller's exit status is the run's. Without xdist the one process
is the controller. The plugin is registered on the controller only (`register`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

ALLOW_SKIPS_ENV = "NODEROLL_ALLOW_SKIPS"
DOCKER_MARKER = "docker"
DOCKER_TIER_DIR = "tests/docker/"
PLUGIN_NAME = "noderoll-skip-policy"


@dataclass(frozen=True)
class Skip:
    """One skipped test (or collected module) and why."""

    nodeid: str
    reason: str
    docker_tier: bool


def allowed(env: Mapping[str, str]) -> bool:
    """Whether the environment allows skips outside the Docker tier (`NODEROLL_ALLOW_SKIPS`). Pure."""
    return env.get(ALLOW_SKIPS_ENV, "").strip().lower() in ("1", "true", "yes")


def in_docker_tier(nodeid: str, keywords: Iterable[str]) -> bool:
    """A test of the Docker tier: marked `docker`, or under tests/docker/. Pure."""
    return DOCKER_MARKER in set(keywords) or nodeid.startswith(DOCKER_TIER_DIR)


def unexpected(skips: Iterable[Skip], allow: bool) -> list[Skip]:
    """The skips that fail the run: every one outside the Docker tier, unless allowed. Pure."""
    return [] if allow else [s for s in skips if not s.docker_tier]


def failing_status(current: int, unexpected_skips: list[Skip]) -> int:
    """The run's exit status: a run that passed (0) fails (1) with unexpected skips; any other stays. Pure."""
    if current == pytest.ExitCode.OK and unexpected_skips:
        return int(pytest.ExitCode.TESTS_FAILED)
    return current


def skip_of(report: pytest.TestReport | pytest.CollectReport) -> Skip | None:
    """The skip a report records (None: not a skip; an xfail is not one)."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    longrepr: Any = report.longrepr
    # A skip's longrepr is (file, line, "Skipped: reason"); anything else is shown as it is.
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return Skip(report.nodeid, reason.removeprefix("Skipped: "), in_docker_tier(report.nodeid, getattr(report, "keywords", ())))


class SkipPolicy:
    """Collects the skips reported to this process and decides the exit status at the end."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.allow = allowed(env)
        self.skips: list[Skip] = []

    def _record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        skip = skip_of(report)
        if skip is not None and skip not in self.skips:
            self.skips.append(skip)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        session.exitstatus = failing_status(session.exitstatus, unexpected(self.skips, self.allow))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        outside = [s for s in self.skips if not s.docker_tier]
        if not outside:
            return
        verdict = (f"allowed by {ALLOW_SKIPS_ENV}=1" if self.allow
                   else f"the run FAILS; set {ALLOW_SKIPS_ENV}=1 to allow them")
        terminalreporter.section("skips outside the Docker tier", sep="=", red=not self.allow, bold=True)
        for skip in outside:
            terminalreporter.write_line(f"{skip.nodeid}: {skip.reason}")
        terminalreporter.write_line(f"{len(outside)} skip(s) outside the Docker tier: {verdict}")


def register(config: pytest.Config) -> None:
    """Register the policy on the controller (or the only process); test processes of xdist get none."""
    if hasattr(config, "workerinput") or config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    config.pluginmanager.register(SkipPolicy(os.environ), PLUGIN_NAME)


def pytest_configure(config: pytest.Config) -> None:
    """Entry point when loaded with `-p tests.helpers.skip_policy` (tests/conftest.py calls `register`)."""
    register(config)
