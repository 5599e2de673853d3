"""The skip policy (tests/helpers/skip_policy.py): a skip outside the Docker tier fails the run.

The decision functions are pure and tested as such; the plugin itself is tested the way it works,
by running pytest on a few small test files in a temporary folder (one process, and two with
pytest-xdist, where the skips reach the controller as reports).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.skip_policy import (
    ALLOW_SKIPS_ENV,
    Skip,
    allowed,
    failing_status,
    in_docker_tier,
    unexpected,
)

ROOT = Path(__file__).resolve().parents[2]
DOCKER = Skip("tests/docker/test_k3s_rollout.py::test_one", "docker tier skipped: no Docker engine answers", True)
PROMETHEUS = Skip("tests/integration/test_gates_and_windows.py::test_gate", "no Prometheus server here", False)


@pytest.mark.parametrize(("env", "expected"), [
    pytest.param({}, False, id="unset"),
    pytest.param({ALLOW_SKIPS_ENV: ""}, False, id="empty"),
    pytest.param({ALLOW_SKIPS_ENV: "0"}, False, id="zero"),
    pytest.param({ALLOW_SKIPS_ENV: "1"}, True, id="one"),
    pytest.param({ALLOW_SKIPS_ENV: " True "}, True, id="true"),
    pytest.param({ALLOW_SKIPS_ENV: "yes"}, True, id="yes"),
])
def test_allowed_only_by_the_documented_variable(env: dict[str, str], expected: bool) -> None:
    assert allowed(env) is expected


@pytest.mark.parametrize(("nodeid", "keywords", "expected"), [
    pytest.param("tests/docker/test_k3s_rollout.py::test_one", [], True, id="folder"),
    pytest.param("elsewhere/test_x.py::test_y", ["docker"], True, id="marker"),
    pytest.param("tests/integration/test_helm_dry_run.py::test_z", ["integration"], False, id="other-tier"),
    pytest.param("tests/dockerfile/test_x.py::test_y", [], False, id="similar-folder"),
])
def test_the_docker_tier_is_its_folder_or_its_marker(nodeid: str, keywords: list[str], expected: bool) -> None:
    assert in_docker_tier(nodeid, keywords) is expected


@pytest.mark.parametrize(("skips", "allow", "expected"), [
    pytest.param([], False, [], id="none"),
    pytest.param([DOCKER], False, [], id="docker-only"),
    pytest.param([DOCKER, PROMETHEUS], False, [PROMETHEUS], id="prometheus-fails"),
    pytest.param([DOCKER, PROMETHEUS], True, [], id="allowed"),
])
def test_unexpected_skips(skips: list[Skip], allow: bool, expected: list[Skip]) -> None:
    assert unexpected(skips, allow) == expected


@pytest.mark.parametrize(("current", "skips", "expected"), [
    pytest.param(0, [], 0, id="passed"),
    pytest.param(0, [PROMETHEUS], 1, id="passed-but-skipped"),
    pytest.param(1, [PROMETHEUS], 1, id="failed-anyway"),
    pytest.param(2, [PROMETHEUS], 2, id="interrupted-stays"),
    pytest.param(5, [], 5, id="nothing-collected-stays"),
])
def test_failing_status(current: int, skips: list[Skip], expected: int) -> None:
    assert failing_status(current, skips) == expected


FILES = {
    "passes": "def test_passes():\n    pass\n",
    "skips": "import pytest\n\ndef test_needs_prometheus():\n    pytest.skip('no Prometheus server here')\n",
    "module_skip": "import pytest\n\npytest.skip('no helm here', allow_module_level=True)\n\ndef test_x():\n    pass\n",
    "fails": "def test_fails():\n    assert False\n",
    "xfails": "import pytest\n\n@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert False\n",
    "docker": "import pytest\n\ndef test_k3s():\n    pytest.skip('docker tier skipped: no Docker engine answers')\n",
}


def run_pytest(tmp_path: Path, files: list[str], *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """pytest on the chosen FILES (the "docker" one under tests/docker/) with the plugin loaded."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name in files:
        folder = tmp_path / "tests" / ("docker" if name == "docker" else "unit")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"test_{name}.py").write_text(FILES[name])
    environ = {k: v for k, v in os.environ.items() if k != ALLOW_SKIPS_ENV}
    environ.update(env or {}, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.helpers.skip_policy", "-p", "no:cacheprovider", "-rfEs",
         "-o", "asyncio_default_fixture_loop_scope=function", *args, "tests"],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout + result.stderr


CASES = [
    pytest.param(["passes", "docker"], {}, 0, [], id="docker-skip-passes"),
    pytest.param(["passes", "xfails"], {}, 0, [], id="xfail-is-no-skip"),
    pytest.param(["passes", "skips"], {}, 1, [], id="other-skip-fails"),
    pytest.param(["passes", "module_skip"], {}, 1, [], id="module-skip-fails"),
    pytest.param(["passes", "skips"], {ALLOW_SKIPS_ENV: "1"}, 0, [], id="allowed"),
    pytest.param(["fails", "skips"], {}, 1, [], id="failure-stays-failure"),
    # Two test processes: the skips reach the controller as reports.
    pytest.param(["passes", "docker"], {}, 0, ["-n", "2"], id="xdist-docker-skip-passes"),
    pytest.param(["passes", "skips"], {}, 1, ["-n", "2"], id="xdist-other-skip-fails"),
    pytest.param(["passes", "module_skip"], {}, 1, ["-n", "2"], id="xdist-module-skip-fails"),
    pytest.param(["passes", "skips"], {ALLOW_SKIPS_ENV: "1"}, 0, ["-n", "2"], id="xdist-allowed"),
]


@pytest.mark.parametrize(("files", "env", "expected", "processes"), CASES)
def test_the_plugin_decides_the_exit_status(
    tmp_path: Path, files: list[str], env: dict[str, str], expected: int, processes: list[str]
) -> None:
    code, output = run_pytest(tmp_path, files, *processes, env=env)
    assert code == expected, output
    if "skips" in files and "fails" not in files:
        # The reason is printed (-rfEs) and the policy names the skip and the way to allow it.
        assert "no Prometheus server here" in output and "tests/unit/test_skips.py::test_needs_prometheus" in output
        assert f"{ALLOW_SKIPS_ENV}=1" in output, output
