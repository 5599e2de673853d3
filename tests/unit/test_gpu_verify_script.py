"""The example GPU verify image's script (deploy/examples/verify/gpu-health/gpu-verify.sh): what it runs
and what it decides, with stand-in `dcgmi`, `nvidia-smi` and `chroot` programs on PATH that print what
the real ones print (this machine has no GPU; the real tools are untested here, as its README says)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy/examples/verify/gpu-health/gpu-verify.sh"
DCGM_PASS = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| Persistence Mode          | Pass                                           |
| Page Retirement/Row Remap | Pass                                           |
+---------------------------+------------------------------------------------+
"""
DCGM_FAIL = DCGM_PASS.replace("| Page Retirement/Row Remap | Pass      ", "| Page Retirement/Row Remap | Fail - GPU: 1")


def tool(folder: Path, name: str, output: str, code: int = 0) -> None:
    """A stand-in program `name` in `folder` printing `output`, exiting `code`, and logging its arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.out").write_text(output)
    path = folder / name
    path.write_text(f'#!/bin/sh\necho "$0 $*" >> "{folder}/calls"\ncat "{folder}/{name}.out"\nexit {code}\n')
    path.chmod(0o755)


def run(tmp_path: Path, bin_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The script with PATH = the stand-ins and the system's basic tools (no GPU tool of this machine),
    the node's root an empty folder of its own."""
    system = tmp_path / "system"
    system.mkdir(exist_ok=True)
    for name in ("sh", "cat", "grep", "awk", "head", "tail", "tr", "mktemp", "rm"):
        found = next((Path(d) / name for d in ("/usr/bin", "/bin") if (Path(d) / name).exists()), None)
        assert found is not None, name
        if not (system / name).exists():
            (system / name).symlink_to(found)
    path = ":".join(str(p) for p in (bin_dir, system) if p is not None)
    env = {"PATH": path, "NODEROLL_ROOT": str(tmp_path / "host"), "HOME": str(tmp_path)}
    return subprocess.run(["/bin/sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)


def test_dcgm_quick_diagnostic_passes(tmp_path: Path) -> None:
    tool(tmp_path / "bin", "dcgmi", DCGM_PASS)
    tool(tmp_path / "bin", "nvidia-smi", "0, 00000000:07:00.0, 0\n")
    result = run(tmp_path, tmp_path / "bin")
    assert result.returncode == 0, result.stderr
    assert "gpu-verify: PASSED: dcgmi diag -r 1" in result.stdout
    # dcgmi where it exists: nvidia-smi is not asked.
    assert (tmp_path / "bin/calls").read_text().split("\n")[0].endswith("dcgmi diag -r 1")


def test_a_failed_dcgm_test_fails_the_verify_naming_it(tmp_path: Path) -> None:
    tool(tmp_path / "bin", "dcgmi", DCGM_FAIL, code=0)  # a Fail row fails it whatever dcgmi's exit code
    result = run(tmp_path, tmp_path / "bin")
    assert result.returncode == 1
    assert "gpu-verify: FAILED: dcgmi diag -r 1: a test failed:" in result.stderr
    assert "Page Retirement/Row Remap | Fail - GPU: 1" in result.stderr


def test_dcgmi_without_a_host_engine_fails_clearly(tmp_path: Path) -> None:
    tool(tmp_path / "bin", "dcgmi", "Error: unable to establish a connection to the specified host: localhost\n", code=255)
    result = run(tmp_path, tmp_path / "bin")
    assert result.returncode == 3 and "dcgmi diag -r 1 exited 255 (is a DCGM host engine running?" in result.stderr


@pytest.mark.parametrize(("output", "code", "exit_code", "message"), [
    pytest.param("0, 00000000:07:00.0, 0\n1, 00000000:0F:00.0, [N/A]\n", 0, 0,
                 "gpu-verify: PASSED: nvidia-smi: 2 GPU(s), no uncorrected ECC error", id="healthy"),
    pytest.param("0, 00000000:07:00.0, 0\n1, 00000000:0F:00.0, 3\n", 0, 1,
                 "FAILED: GPU 1 (00000000:0F:00.0): 3 uncorrected ECC error(s)", id="ecc-errors"),
    pytest.param("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 9, 3,
                 "FAILED: nvidia-smi exited 9: NVIDIA-SMI has failed", id="no-driver"),
    pytest.param("", 0, 1, "FAILED: nvidia-smi lists no GPU", id="no-gpu"),
])
def test_nvidia_smi_where_dcgmi_does_not_exist(tmp_path: Path, output: str, code: int, exit_code: int,
                                               message: str) -> None:
    tool(tmp_path / "bin", "nvidia-smi", output, code)
    result = run(tmp_path, tmp_path / "bin")
    assert result.returncode == exit_code, result.stdout + result.stderr
    assert message in result.stdout + result.stderr


def test_the_nodes_own_tool_runs_chrooted_into_its_root(tmp_path: Path) -> None:
    # The GPU Operator's driver root on the node: found there, run with `chroot <root> <tool>`.
    driver = tmp_path / "host/run/nvidia/driver/usr/bin"
    tool(driver, "nvidia-smi", "0, 00000000:07:00.0, 0\n")
    chroot = tmp_path / "bin"
    chroot.mkdir()
    (chroot / "chroot").write_text('#!/bin/sh\nroot="$1"; shift; tool="$1"; shift\nexec "$root$tool" "$@"\n')
    (chroot / "chroot").chmod(0o755)
    result = run(tmp_path, chroot)
    assert result.returncode == 0, result.stderr
    assert f"gpu-verify: chroot {tmp_path}/host/run/nvidia/driver /usr/bin/nvidia-smi --query-gpu" in result.stdout


def test_no_tool_at_all_fails_saying_so(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 2
    assert "gpu-verify: FAILED: neither dcgmi nor nvidia-smi found" in result.stderr
    assert os.access(SCRIPT, os.X_OK)
