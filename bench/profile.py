"""`noderoll bench --profile`: py-spy attached to worker, bridge and fleetsim during a rollout. Starts processes.

Issue 14 asks that a missed target name the component that limits it "with the profile that shows
it". py-spy samples a running interpreter from outside (no change to the process), so the profile is
of the very processes the bench measures. It records with `--gil`: only the thread holding the GIL
is sampled, i.e. Python running on a CPU. Without it py-spy's idle detection let waiting threads in:
in a 200-node run a quarter of the worker's samples were its event loop in `epoll` and watch streams
blocked in a socket read. Each profile is written in py-spy's raw (collapsed stacks) format,
`<workdir>/profile-<run>-<process>.txt`, which flamegraph tools and speedscope read; `summarize` turns one
into the few lines the bench prints and keeps in its JSON: where the sampled CPU went, by function
(self time) and by noderoll package (inclusive).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from rich.table import Table

# Samples per second (py-spy's default is 100). Not free: py-spy walks every thread's stack at each
# sample, and the worker has hundreds of activity threads; at 200 nodes the three recorders took about
# two thirds of a core (measured: `profiler_cpu_share` in the JSON), so a profiled run's timings are
# not the bench's figures: profile in a run of its own.
RATE = 50
TOP = 8
# Top-level packages of this repository: the share of each shows which layer is busy. Not `bench`:
# its request counter (`bench.reqcount`) wraps every Kubernetes request of the profiled worker and
# bridge, so it would take the samples of the code that made the request.
NODEROLL_PACKAGES = ("activities", "workflows", "kube", "crd_bridge", "worker", "cli", "service", "fleetsim",
                     "planning", "api", "protocol", "metrics", "agent")


def py_spy() -> str:
    """The py-spy executable (next to this interpreter or on PATH); a clear error when it is missing."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("noderoll bench --profile needs py-spy: pip install py-spy (it is in noderoll's `local` extra)")
    return found


@dataclass
class Profiles:
    """py-spy recorders attached to running processes, stopped (and their files written) by `stop`."""

    workdir: Path
    # Names the files of one rollout: `<workdir>/profile-<run>-<process>.txt`.
    run: str
    recorders: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)

    def attach(self, name: str, pid: int) -> None:
        """Sample `pid` and its children (fleetsim's forked agents, the bench's request counter's child)."""
        out = self.path(name)
        self.recorders[name] = subprocess.Popen(
            [py_spy(), "record", "--pid", str(pid), "--subprocesses", "--rate", str(RATE), "--nonblocking", "--gil",
             "--full-filenames", "--format", "raw", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=open(out.with_suffix(".log"), "ab"),  # noqa: SIM115
            stdin=subprocess.DEVNULL)
        self.started[name] = time.monotonic()

    def path(self, name: str) -> Path:
        return self.workdir / f"profile-{self.run}-{name}.txt"

    def stop(self) -> dict[str, dict[str, object]]:
        """Stop every recorder (SIGINT: py-spy writes its file and exits) and summarize each profile."""
        # What the recorders cost: CPU seconds per second of recording (1.0 = one core).
        cost: dict[str, float] = {}
        for name, proc in self.recorders.items():
            try:
                times = psutil.Process(proc.pid).cpu_times()
                cost[name] = round((times.user + times.system) / max(time.monotonic() - self.started[name], 1e-9), 3)
            except psutil.Error:
                pass
        for proc in self.recorders.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        summaries: dict[str, dict[str, object]] = {}
        for name, proc in self.recorders.items():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            path = self.path(name)
            if path.exists():
                summaries[name] = {"file": str(path), "profiler_cpu_share": cost.get(name),
                                   **summarize(path.read_text(errors="replace"))}
        self.recorders.clear()
        return summaries


def summarize(collapsed: str, top: int = TOP) -> dict[str, object]:
    """Where the samples of a collapsed-stacks profile went. Pure.

    Each line is `frame;frame;...;leaf count` (outermost first), a frame `function (file:line)`.
    Returns the sample count, the `top` leaf functions by share of samples (self time), and the share
    of samples per noderoll package, each sample counted for the innermost noderoll frame on its stack:
    the code of ours that was running or called the library that was (outer frames such as the
    bench's request counter or the CLI's `main` are on every stack and say nothing). Samples with no
    frame of ours (the Temporal SDK's event loop, the kubernetes client's threads) count as `other`."""
    leaves: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        leaves[_function(frames[-1])] += count
        packages[next((p for f in reversed(frames) if (p := _package(f))), "other")] += count
    if not total:
        return {"samples": 0, "top_self": [], "packages": {}}
    return {
        "samples": total,
        "top_self": [[name, round(n / total, 3)] for name, n in leaves.most_common(top)],
        "packages": {p: round(n / total, 3) for p, n in packages.most_common()},
    }


def _function(frame: str) -> str:
    """`name (path/to/module.py:12)` -> `name (module.py)`: one entry per function, not per line."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({file.rsplit('/', 1)[-1]})" if file else name


def _package(frame: str) -> str | None:
    """The noderoll package a frame's file belongs to, or None (the standard library, a dependency)."""
    _, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    if "/site-packages/" in file or "/lib/python3" in file:
        return None  # a dependency's `api/` or `agent/` is not ours
    return next((part for part in file.split("/")[:-1] if part in NODEROLL_PACKAGES), None)


def render_profile(row: dict[str, Any]) -> Table:
    """One rollout's py-spy summaries: samples, busiest packages, top functions by self time. Pure."""
    table = Table(title=f"{row['nodes']} nodes: where the sampled CPU went (py-spy, on-CPU samples)")
    for header in ("process", "samples", "packages (innermost frame of ours)", "functions (self share)"):
        table.add_column(header)
    for name, prof in sorted(row["profile"].items()):
        packages = ", ".join(f"{p} {share:.0%}" for p, share in list(prof["packages"].items())[:5])
        functions = "\n".join(f"{share:.0%} {fn}" for fn, share in prof["top_self"][:5])
        table.add_row(name, str(prof["samples"]), packages, functions)
    return table
