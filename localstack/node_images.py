"""The images of the real-node tier, built locally (no registry): recipes over rootfs + oci. Writes files.

* the pod sandbox image (`localstack.realnode.PAUSE_IMAGE`): busybox, a shell that waits for SIGTERM;
* a NodeWright-style package image: busybox plus a package folder at `/skyhook-package` (as
  NodeWright's public package images are laid out);
* noderoll's agent image: Debian's python3.11 plus `agent/` (what `deploy/package-base/Dockerfile`
  builds with Docker);
* noderoll's own image (worker and bridge): Debian's python3.11, noderoll's runtime dependencies
  from this virtualenv and its packages (what the top-level `Dockerfile` builds with Docker);
* the example GPU verify image (deploy/examples/verify/gpu-health on busybox) and a busybox image
  running one command (a verify that checks only what a GPU-less node has).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from localstack import oci, rootfs

PAUSE_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]


def _archive(workdir: Path, spec: oci.ImageSpec, fill: list[tuple[str, Path]], base: str,
             applets: tuple[str, ...] = rootfs.BUSYBOX_APPLETS) -> Path:
    """Build `base` ("busybox", with `applets`, or "python") plus the given (path in image, source folder) trees."""
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp) / "rootfs"
        if base == "busybox":
            rootfs.busybox_rootfs(root, applets)
        else:
            rootfs.python_rootfs(root)
        for inside, source in fill:
            shutil.copytree(source, root / inside.lstrip("/"), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        out = workdir / (spec.reference.replace("/", "_").replace(":", "_") + ".oci.tar")
        oci.write_archive(root, spec, out)
        return out


def pause_image(workdir: Path, reference: str) -> Path:
    """The pod sandbox image."""
    return _archive(workdir, oci.ImageSpec(reference, entrypoint=PAUSE_COMMAND), [], "busybox")


def package_image(workdir: Path, reference: str, package_folder: Path, inside: str = "/skyhook-package") -> Path:
    """A busybox image holding `package_folder` at `inside` (NodeWright's layout by default)."""
    spec = oci.ImageSpec(reference, cmd=["/bin/sh"])
    return _archive(workdir, spec, [(inside, package_folder)], "busybox")


# What the example GPU verify script runs (deploy/examples/verify/gpu-health/gpu-verify.sh).
VERIFY_APPLETS = (*rootfs.BUSYBOX_APPLETS, "mktemp", "grep", "awk", "head", "tail", "tr", "chroot")


def verify_image(workdir: Path, reference: str, script: Path) -> Path:
    """The example GPU verify image as its Dockerfile builds it on busybox: `script` at
    /usr/local/bin/gpu-verify, run by /bin/sh as the entry point."""
    spec = oci.ImageSpec(reference, entrypoint=["/bin/sh", "/usr/local/bin/gpu-verify"],
                         env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DCGM_DIAG_LEVEL=1"])
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        shutil.copy2(script, Path(tmp) / "gpu-verify")
        return _archive(workdir, spec, [("/usr/local/bin", Path(tmp))], "busybox", VERIFY_APPLETS)


def command_image(workdir: Path, reference: str, command: list[str]) -> Path:
    """A busybox image whose entry point is `command` (with the verify script's applets)."""
    return _archive(workdir, oci.ImageSpec(reference, entrypoint=command), [], "busybox", VERIFY_APPLETS)


def agent_image(workdir: Path, reference: str, repo: Path) -> Path:
    """noderoll's agent image: python3.11 and `agent/`, entry point `python3.11 -m agent`."""
    spec = oci.ImageSpec(reference, entrypoint=["python3.11", "-m", "agent"], cmd=["--help"],
                         env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                              "PYTHONPATH=/opt/noderoll", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"],
                         workdir="/noderoll-package")
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        (Path(tmp) / "empty").mkdir()
        return _archive(workdir, spec, [("/opt/noderoll/agent", repo / "agent"),
                                        ("/noderoll-package", Path(tmp) / "empty")], "python")


def noderoll_image(workdir: Path, reference: str, repo: Path) -> Path:
    """noderoll's worker/bridge image: python3.11, its runtime dependencies and its packages."""
    spec = oci.ImageSpec(reference, entrypoint=["python3.11", "-m", "cli"], cmd=["--help"],
                         env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                              "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "HOME=/tmp"],
                         workdir="/tmp", user="65532:65532")
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp) / "rootfs"
        rootfs.python_rootfs(root)
        rootfs.site_packages(root, repo)
        out = workdir / (reference.replace("/", "_").replace(":", "_") + ".oci.tar")
        oci.write_archive(root, spec, out)
        return out
