"""The Docker tier: needs a Docker engine (testcontainers). Without one every test here is skipped and
the reason is printed at the end of the run. The check is one ping with a short timeout: never hangs."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

import pytest

PING_TIMEOUT_SECONDS = 5


@cache
def docker_unavailable() -> str | None:
    """Why no Docker engine can be used, or None when one answers."""
    try:
        import docker
    except ImportError as err:
        return f"the docker SDK is not installed ({err})"
    try:
        engine = docker.from_env(timeout=PING_TIMEOUT_SECONDS)
        engine.ping()
        engine.close()
    except Exception as err:  # any failure to reach an engine means: skip this tier
        return f"no Docker engine answers ({type(err).__name__}: {err})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/docker/" in str(item.path):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    reason = docker_unavailable()
    if reason:
        pytest.skip(f"docker tier skipped: {reason}")
    yield


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if any("tests/docker/" in str(r.nodeid) or "docker/" in r.nodeid
           for r in terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(f"docker tier skipped: {docker_unavailable()}")
