"""A Prometheus server for the analysis-gate tests and `noderoll demo --gates`. Does I/O (apt-get, a process).

`prometheus_binary()` finds `prometheus` (`$NODEROLL_PROMETHEUS_BIN`, then `/usr/bin/prometheus`
from Debian's `prometheus` package, then `PATH`) and, when it is missing and we are root on a Debian
machine, installs the Debian package once (`apt-get install --no-install-recommends prometheus`; apt
keeps it installed, so later runs find it at once; a file lock keeps parallel test sessions from
racing apt). `scripts/bootstrap` runs this too (`python -m localstack.prometheus`), and a test fixture
skips with the exact reason when it cannot be had.

`PrometheusServer` runs one private server: its own config (scraping the given targets every
second), its own data directory and a free port on 127.0.0.1; `start()` waits for `/-/ready`,
`stop()` ends it. The Debian package's own service (started by systemd on machines that have it)
is never used or touched.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import yaml

from localstack.provision import ProvisionError, k8s_cache_dir

PROMETHEUS_BIN_ENV = "NODEROLL_PROMETHEUS_BIN"
DEBIAN_PROMETHEUS = Path("/usr/bin/prometheus")
READY_TIMEOUT_SECONDS = 60.0


def _find() -> Path | None:
    pinned = os.environ.get(PROMETHEUS_BIN_ENV)
    if pinned:
        if os.access(pinned, os.X_OK):
            return Path(pinned)
        raise ProvisionError(f"{pinned} (from ${PROMETHEUS_BIN_ENV}) is not an executable prometheus.")
    if os.access(DEBIAN_PROMETHEUS, os.X_OK):
        return DEBIAN_PROMETHEUS
    found = shutil.which("prometheus")
    return Path(found) if found else None


def prometheus_binary(*, install: bool = True) -> Path:
    """The prometheus executable; installs Debian's `prometheus` package when missing and we are root."""
    found = _find()
    if found is not None:
        return found
    if not install:
        raise ProvisionError("prometheus is not installed (Debian: `apt-get install prometheus`)")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ProvisionError("prometheus is not installed and cannot be installed here (needs root and apt-get): "
                             "run `apt-get install prometheus` or set $NODEROLL_PROMETHEUS_BIN")
    lock_path = k8s_cache_dir().parent.parent / "prometheus-install.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be installing it right now
        found = _find()
        if found is not None:
            return found
        print("installing prometheus (Debian package prometheus)...", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        wait = ["-o", "DPkg::Lock::Timeout=600"]
        subprocess.run(["apt-get", *wait, "update", "-qq"], check=False, env=env)
        result = subprocess.run(["apt-get", *wait, "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
                                check=False, env=env, capture_output=True, text=True)
        found = _find()
        if found is None:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise ProvisionError(f"`apt-get install prometheus` failed (exit {result.returncode}): {' '.join(tail)}")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrometheusServer:
    """One private Prometheus scraping `targets` (host:port) every second (module docstring)."""

    def __init__(self, targets: Sequence[str], binary: Path | None = None, port: int | None = None,
                 log: Path | None = None) -> None:
        self.binary = binary or prometheus_binary()
        self.targets = list(targets)
        self.port = port or free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="noderoll-prometheus-")
        self.log = log or Path(self._dir.name) / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """The base URL (what a gate's `address` or `--prometheus-address` takes)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PrometheusServer:
        """Start the server and wait until it is ready; RuntimeError with its log tail when it is not."""
        folder = Path(self._dir.name)
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": "noderoll-test", "static_configs": [{"targets": self.targets}]}]}
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        argv = [str(self.binary), f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.address}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
        self.stop()
        raise RuntimeError(f"prometheus on port {self.port} did not become ready: {' / '.join(tail)}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove its files."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None
        self._dir.cleanup()


def main() -> int:
    """Make sure prometheus is installed (for `scripts/bootstrap`); one line either way."""
    try:
        print(f"analysis-gate tests: prometheus {prometheus_binary()}")
    except ProvisionError as err:
        print(f"warning: {err}; the real-Prometheus gate tests and `demo --gates` will say so and skip",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
