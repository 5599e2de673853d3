"""Root filesystems for the real-node tier's images, from this machine's Debian packages. Writes files.

No registry and no base image can be pulled, so each image's files come from packages installed on
this machine: `busybox-static` for busybox-style images (a NodeWright package image, the pod sandbox
"pause" image), and Debian's `python3.11` (the interpreter, its standard library and the shared
libraries they link, found with `ldd`) for noderoll's agent image and its worker/bridge image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
# What the copy container (`/bin/sh -c` with cp) and a pause container (sleep) need, and a few more.
BUSYBOX_APPLETS = ("sh", "cp", "mkdir", "cat", "ls", "echo", "sleep", "test", "[", "cut", "rm", "mv", "cmp", "true")
PYTHON = "python3.11"
# Debian's interpreter, by path: a pyenv shim or a virtualenv link earlier on PATH is not it.
PYTHON_BIN = Path("/usr/bin") / PYTHON
# Parts of the standard library an agent or a worker never imports (tests, GUIs, the build helpers).
STDLIB_SKIP = frozenset({"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
                         "site-packages", "dist-packages", "__pycache__", "config-3.11-x86_64-linux-gnu"})
_LDD_PATH = re.compile(r"(/\S+)")


class RootfsError(RuntimeError):
    """A file an image needs is missing on this machine; the message names the package."""


def _linked(binary: Path) -> list[str]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    return [m.group(1) for line in out.splitlines()
            if "=>" in line or line.strip().startswith("/")
            if (m := _LDD_PATH.search(line.split("=>")[-1]))]


def copy_with_libraries(root: Path, binaries: Iterable[Path]) -> None:
    """Copy executables or shared objects (at their own path) and every library they link."""
    seen: set[str] = set()
    for binary in binaries:
        for source in [str(binary), *_linked(binary)]:
            if source in seen:
                continue
            seen.add(source)
            target = root / source.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(source), target)


def busybox_rootfs(root: Path, applets: Iterable[str] = BUSYBOX_APPLETS) -> Path:
    """A busybox-style root: `/bin/busybox` (static, Debian busybox-static) and applet links."""
    if not BUSYBOX.is_file():
        raise RootfsError(f"{BUSYBOX} is missing: apt-get install busybox-static")
    (root / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin/busybox")
    for applet in applets:
        link = root / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    for folder in ("tmp", "etc", "proc", "sys", "dev"):
        (root / folder).mkdir(exist_ok=True)
    return root


def _stdlib() -> Path:
    if not PYTHON_BIN.is_file() or not (Path("/usr/lib") / PYTHON).is_dir():
        raise RootfsError(f"{PYTHON_BIN} is missing: apt-get install {PYTHON}")
    return Path("/usr/lib") / PYTHON


def python_rootfs(root: Path) -> Path:
    """Debian's python3.11 (interpreter, standard library, linked libraries) under `root`."""
    stdlib = _stdlib()
    interpreter = PYTHON_BIN
    shutil.copytree(stdlib, root / str(stdlib).lstrip("/"), symlinks=False, ignore_dangling_symlinks=True,
                    ignore=lambda _dir, names: [n for n in names if n in STDLIB_SKIP], dirs_exist_ok=True)
    extensions = sorted((root / str(stdlib).lstrip("/") / "lib-dynload").glob("*.so"))
    copy_with_libraries(root, [interpreter.resolve()])
    # The extension modules link libraries of their own (libffi for ctypes, libssl for hashlib, ...).
    copy_with_libraries(root, [stdlib / "lib-dynload" / e.name for e in extensions])
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    link = root / "usr/bin/python3"
    if not link.exists() and not link.is_symlink():
        link.symlink_to(PYTHON)
    for folder in ("tmp", "etc", "proc", "sys", "dev"):
        (root / folder).mkdir(exist_ok=True)
    return root


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    names = []
    for requirement in dist.requires or []:
        if ";" in requirement and "extra ==" in requirement.split(";", 1)[1]:
            continue  # optional extras (local, test) are not runtime dependencies
        names.append(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0])
    return names


def runtime_distributions(top: str = "noderoll") -> list[metadata.Distribution]:
    """`top` and its runtime dependencies (extras left out), as installed in this environment."""
    found: dict[str, metadata.Distribution] = {}
    pending = [top]
    while pending:
        name = pending.pop().lower().replace("_", "-")
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a marker-only dependency of another platform
        found[name] = dist
        pending += _requirement_names(dist)
    return list(found.values())


def source_packages(repo: Path) -> list[str]:
    """noderoll's own top-level packages, as pyproject.toml lists them for setuptools (one list: an image
    built from a hand-kept copy of it lacked `protocol` and `webhook`, and every process in it failed
    to import)."""
    with (repo / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return [pattern.removesuffix("*") for pattern in patterns]


def site_packages(root: Path, repo: Path, top: str = "noderoll") -> Path:
    """noderoll's runtime dependencies (this virtualenv's installed files) and its own packages."""
    target = root / "usr/lib/python3/dist-packages"
    target.mkdir(parents=True, exist_ok=True)
    for dist in runtime_distributions(top):
        if dist.metadata["Name"].lower() == top:
            continue  # an editable install: its packages are copied from the source tree below
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if source.is_file() and "__pycache__" not in source.parts and ".." not in Path(str(file)).parts:
                dest = target / str(file)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest)
    for package in source_packages(repo):
        if (repo / package).is_dir():
            shutil.copytree(repo / package, target / package, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
    # Native extensions (pydantic-core, temporalio's bridge, ...) link system libraries (libgcc_s).
    for extension in sorted(target.rglob("*.so")):
        for library in _linked(extension):
            dest = root / library.lstrip("/")
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(os.path.realpath(library), dest)
    dist = metadata.distribution(top)
    info = target / f"{top}-{dist.version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {top}\nVersion: {dist.version}\n")
    return target


def interpreter_version() -> str:
    """The Python of this environment, as `3.11` (site-packages must match the image's interpreter)."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"
