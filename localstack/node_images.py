"""The images of the real-node tier, built locally (no registry): recipes over rootfs + oci. Writes files.

* the pod sandbox image (`localstack.realnode.PAUSE_IMAGE`): busybox, a shell that waits for SIGTERM;
* a NodeWright-style package image: busybox plus a package folder at `/skyhook-package` (as
  NodeWright's public package images are laid out);
* noderoll's agent image: Debian's python3.11 plus `agent/` (what `deploy/package-base/Dockerfile`
  builds with Docker);
* noderoll's own image (worker and bridge): Debian's python3.11, noderoll's runtime dependencies
  from this virtualenv and its packages (what the top-level `Dockerfile` builds with Docker).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from localstack import oci, rootfs

PAUSE_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]


def _archive(workdir: Path, spec: oci.ImageSpec, fill: list[tuple[str, Path]], base: str) -> Path:
    """Build `base` ("busybox" or "python") plus the given (path in image, source folder) trees."""
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp) / "rootfs"
        if base == "busybox":
            rootfs.busybox_rootfs(root)
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
