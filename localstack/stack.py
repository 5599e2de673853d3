"""`up`, `status` and `down` of the local stack: reuse what runs, start what does not, wait for ready.

A component is reused when its recorded process is alive and its command line is what this
`up` would run (same binaries, same ports of its dependencies); otherwise it is (re)started on
its recorded port when free, else its default port when free, else a port the kernel picks; stacks
starting at once on one machine pick their ports one after the other (`ports_held`).
`stack.json` is rewritten after every start, so `down` can stop even a half-started stack.
Does I/O (processes, files, Kubernetes and Temporal probes).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from localstack import processes
from localstack.cluster import ClusterSetupError, SetupRequest, setup_cluster
from localstack.components import (
    APISERVER,
    COMPONENTS,
    CONTROLLER_MANAGER,
    ETCD,
    EXECUTABLES,
    SCHEDULER,
    TEMPORAL,
    WEBHOOK,
    Binaries,
    Component,
    SearchAttributeTypeError,
    StackLayout,
    register_search_attributes,
)
from localstack.pki import Pki, ensure_pki, kubeconfig_text, write_kubeconfig
from localstack.provision import etcd_binary, k8s_binaries, temporal_binary
from localstack.state import STACK_FILE, ComponentInfo, StackInfo, load_stack_info, save_stack_info

# Start waves: a wave starts once the previous one is ready (the apiserver needs etcd, the
# controller manager, scheduler and admission webhook need the apiserver); Temporal starts with etcd
# and is awaited last.
WAVES: tuple[tuple[str, ...], ...] = ((ETCD, TEMPORAL), (APISERVER,), (CONTROLLER_MANAGER, SCHEDULER, WEBHOOK))
Progress = Callable[[str], None]


# Bound of the first-run cluster set-up (CRDs Established, service-account tokens, webhook answering):
# 5-15 s on an idle 2-core machine; over 90 s was seen at a load average above 20 (several stacks and a
# Kubernetes build at once), when the token controller had not run yet: a bound, not an expected wait.
CLUSTER_SETUP_SECONDS = 240.0


class StackError(RuntimeError):
    """A component did not start or get ready; the message names it and its log file."""


@dataclass(frozen=True)
class ComponentStatus:
    """One line of `dev status`."""

    name: str
    running: bool
    healthy: bool
    pid: int | None
    ports: dict[str, int]
    log: str | None


def _quiet(_: str) -> None:
    return None


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    # Two `up`s (say, two pytest runs sharing a state dir) must not start two copies of a component.
    with open(state_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# Machine-wide, across state dirs: a free port is only ours once a component listens on it, so two
# stacks planning at once (two `dev up`s, parallel test processes) would both pick the same defaults.
PORTS_LOCK_FILE = Path(tempfile.gettempdir()) / "noderoll-localstack-ports.lock"
_ports_depth = threading.local()


@contextlib.contextmanager
def ports_held() -> Iterator[None]:
    """Hold the machine-wide port lock: no other stack on this machine picks ports until it is released.

    `up` holds it from planning its ports until its components listen on them; hold it around stopping
    and restarting a component so nobody takes the freed port meanwhile. Reentrant within a thread.
    """
    depth = getattr(_ports_depth, "value", 0)
    if depth:
        _ports_depth.value = depth + 1
        try:
            yield
        finally:
            _ports_depth.value = depth
        return
    with open(PORTS_LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _ports_depth.value = 1
        try:
            yield
        finally:
            _ports_depth.value = 0


def _by_name() -> dict[str, Component]:
    return {c.name: c for c in COMPONENTS}


def _plan_ports(previous: dict[str, ComponentInfo], alive: set[str]) -> dict[str, dict[str, int]]:
    taken = {port for name in alive for port in previous[name].ports.values()}
    ports: dict[str, dict[str, int]] = {}
    for comp in COMPONENTS:
        recorded = previous.get(comp.name)
        if comp.name in alive and recorded and set(recorded.ports) == set(comp.default_ports):
            ports[comp.name] = dict(recorded.ports)
            continue
        ports[comp.name] = {
            key: processes.pick_port([recorded.ports.get(key) if recorded else None, default], taken)
            for key, default in comp.default_ports.items()
        }
    return ports


def _write_kubeconfigs(layout: StackLayout) -> Path:
    admin = layout.state_dir / "kubeconfig"
    write_kubeconfig(admin, kubeconfig_text(layout.pki, "admin", layout.apiserver_url))
    for client in ("controller-manager", "scheduler"):
        write_kubeconfig(layout.pki.kubeconfig(client), kubeconfig_text(layout.pki, client, layout.apiserver_url))
    return admin


def _log_tail(path: str, lines: int = 8) -> str:
    try:
        tail = Path(path).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n".join("    " + line for line in tail)


def _failure(component: ComponentInfo, timeout: float) -> StackError:
    why = "exited" if not component.is_alive() else f"was not ready within {timeout:.0f}s"
    return StackError(
        f"{component.name} {why}; see its log {component.log}\n{_log_tail(component.log)}\n"
        f"(other components keep running: `noderoll dev down --state-dir {Path(component.log).parents[1]}` stops them)"
    )


def _wait_ready(comp: Component, info: ComponentInfo, layout: StackLayout) -> None:
    deadline = time.monotonic() + comp.start_timeout
    if not processes.wait_until(lambda: comp.healthy(layout), deadline, while_alive=info):
        raise _failure(info, comp.start_timeout)


@dataclass
class _Run:
    """The state of one `up` call."""

    layout: StackLayout
    info: StackInfo
    previous: dict[str, ComponentInfo]
    progress: Progress
    die_with_parent: bool = False

    def ensure(self, comp: Component) -> None:
        argv = comp.argv(self.layout)
        old = self.previous.get(comp.name)
        if old is not None and old.is_alive() and old.argv == argv and old.runs_current_binary():
            self.progress(f"{comp.name}: reusing pid {old.pid}")
            self.info.components[comp.name] = old
            return
        if old is not None and old.is_alive():
            self.progress(f"{comp.name}: restarting (command line or binary changed)")
            processes.stop(old)
        log = self.layout.state_dir / "logs" / f"{comp.name}.log"
        launch = processes.Launch(comp.name, argv, self.layout.ports[comp.name], log, self.die_with_parent)
        started = processes.start(launch)
        self.progress(f"{comp.name}: started pid {started.pid}, log {log}")
        self.info.components[comp.name] = started
        save_stack_info(self.info)


def up(state_dir: Path, progress: Progress = _quiet, *, die_with_parent: bool = False,
       temporal: bool = True) -> StackInfo:
    """Bring the stack up in `state_dir` (idempotent) and return it once everything is ready.

    `die_with_parent` ties the components it starts to the calling thread (test sessions).
    `temporal=False` starts the Kubernetes part only (etcd, control plane, webhook): a second cluster
    for a Temporal that another stack runs (the multi-cluster tests; its `temporal_address` is "").

    Raises `localstack.provision.ProvisionError` for a missing binary (nothing started), and
    StackError naming the component and its log when a component does not get ready.
    """
    state_dir = state_dir.resolve()
    for sub in ("logs", "data", "pki"):
        (state_dir / sub).mkdir(parents=True, exist_ok=True)
    with _locked(state_dir):
        binaries = Binaries(etcd=etcd_binary(), k8s_dir=k8s_binaries(), temporal=temporal_binary())
        pki = ensure_pki(state_dir / "pki")
        recorded = load_stack_info(state_dir)
        previous = recorded.components if recorded else {}
        alive = {name for name, c in previous.items() if c.is_alive()}
        with ports_held():
            layout = StackLayout(binaries, state_dir, pki, _plan_ports(previous, alive))
            kubeconfig = _write_kubeconfigs(layout)
            info = StackInfo(
                temporal_address=layout.temporal_address if temporal else "",
                temporal_ui=layout.temporal_ui if temporal else "",
                kubeconfig=str(kubeconfig),
                state_dir=str(state_dir),
            )
            run = _Run(layout, info, previous, progress, die_with_parent)
            comps = _by_name()
            for wave in WAVES:
                for name in wave:
                    if name != TEMPORAL or temporal:
                        run.ensure(comps[name])
                for name in wave:
                    if name != TEMPORAL:
                        _wait_ready(comps[name], info.components[name], layout)
            if temporal:
                _wait_ready(comps[TEMPORAL], info.components[TEMPORAL], layout)
        if temporal:
            try:
                register_search_attributes(layout)
            except SearchAttributeTypeError as err:
                raise StackError(str(err)) from err
        try:
            crds = setup_cluster(SetupRequest(kubeconfig, deadline=time.monotonic() + CLUSTER_SETUP_SECONDS,
                                              webhook_url=layout.webhook_url, ca_bundle=pki.ca_cert.read_bytes()))
        except ClusterSetupError as err:
            log = info.components[CONTROLLER_MANAGER].log
            raise StackError(f"cluster set-up failed: {err}; see {log} and {info.components[APISERVER].log}") from err
        progress(f"cluster ready: namespace, {len(crds)} CRD(s) and the admission webhook ({layout.webhook_url})")
        save_stack_info(info)
        return info


def _recorded_layout(info: StackInfo) -> StackLayout:
    """The layout of a recorded stack, enough for health probes (nothing is created)."""
    def binary(name: str) -> Path:
        rec = info.components.get(name)
        return Path(rec.argv[0]) if rec and rec.argv else Path(name)

    binaries = Binaries(etcd=binary(ETCD), k8s_dir=binary(APISERVER).parent, temporal=binary(TEMPORAL))
    ports = {name: dict(c.ports) for name, c in info.components.items()}
    return StackLayout(binaries, Path(info.state_dir), Pki(Path(info.state_dir) / "pki"), ports)


def status(state_dir: Path) -> list[ComponentStatus]:
    """Every component of the stack recorded in `state_dir`: running, healthy, pid, ports, log."""
    info = load_stack_info(state_dir)
    recorded = info.components if info else {}
    layout = _recorded_layout(info) if info else None
    result = []
    for comp in COMPONENTS:
        rec = recorded.get(comp.name)
        if rec is None or layout is None:
            result.append(ComponentStatus(comp.name, False, False, None, {}, None))
            continue
        running = rec.is_alive()
        healthy = running and comp.healthy(layout)
        result.append(ComponentStatus(comp.name, running, healthy, rec.pid, dict(rec.ports), rec.log))
    return result


def down(state_dir: Path, purge: bool = False, progress: Progress = _quiet) -> int:
    """Stop every component (whole process groups) and wait; `purge` also deletes data, logs and PKI.

    Returns the number of processes stopped.
    """
    state_dir = state_dir.resolve()
    if not state_dir.is_dir():
        return 0
    with _locked(state_dir):
        info = load_stack_info(state_dir)
        recorded = info.components if info else {}
        running = [c for c in recorded.values() if c.is_alive()]
        for comp in running:
            progress(f"{comp.name}: stopping pid {comp.pid}")
        stopped = processes.stop_all(running)
        strays = processes.stray_processes(state_dir, EXECUTABLES)
        if strays:
            progress(f"stopping {len(strays)} unrecorded process(es) of this state dir")
            processes.kill_processes(strays)
            stopped += len(strays)
        (state_dir / STACK_FILE).unlink(missing_ok=True)
        if purge:
            for sub in ("data", "logs", "pki"):
                shutil.rmtree(state_dir / sub, ignore_errors=True)
            for name in ("kubeconfig", STACK_FILE + ".tmp"):
                (state_dir / name).unlink(missing_ok=True)
    if purge:
        (state_dir / ".lock").unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            state_dir.rmdir()  # only when nothing but our files was in it
    return stopped
