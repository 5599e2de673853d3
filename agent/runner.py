"""Running the steps of one mode against a host root, with once-only flags and history. Does host I/O.

Flags and history live under `<root>/var/lib/noderoll/<package>/<version>/` so that a step that
completed for this version is not run again (check modes, `config`, `uninstall`, `upgrade` and steps
with `idempotence: true` always run); a flag NodeWright's agent left for the step counts too
(`agent.nodewright`). The package, its config files (`configmaps/`) and the node's metadata
(`node-metadata/`) are staged under that directory first, because inside the chroot of a real node
the pod's own mounts are not visible; the staged step files are made executable, as NodeWright does.
Each step run is logged on the host too (`agent.steplogs`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import nodewright, steplogs
from agent.config import AgentError, PackageConfig, Step, step_file
from agent.host import Host
from agent.modes import (
    ALWAYS_RERUN_MODES,
    EXIT_CONFIG_FILE_MISSING,
    EXIT_CONFIG_INVALID,
    EXIT_HOST,
    EXIT_STEP_FAILED,
    EXIT_STEP_NOT_EXECUTABLE,
    EXIT_STEP_NOT_FOUND,
    EXIT_TERMINATED,
    HISTORY_MODES,
    is_check,
)

UNINSTALLED = "uninstalled"
# What an upgrade step is told was installed when no history (noderoll's or NodeWright's) says (NodeWright's word).
UNKNOWN_VERSION = "unknown"
EXECUTABLE_BITS = 0o111


@dataclass(frozen=True)
class RunRequest:
    """Everything one agent run needs."""

    mode: str
    config: PackageConfig
    package: str  # name used for state paths (NODEROLL_PACKAGE, else config.json's)
    version: str  # version used for state paths (NODEROLL_VERSION, else config.json's)
    package_dir: Path
    config_dir: Path | None
    host: Host
    # The node's labels.json, annotations.json and packages.json (None: not given).
    metadata_dir: Path | None = None


class _Terminated:
    """SIGTERM bookkeeping: stop before the next step, pass the signal to the running one."""

    def __init__(self) -> None:
        self.flag = False
        self.child: subprocess.Popen[bytes] | None = None

    def handle(self, signum: int, _frame: Any) -> None:
        self.flag = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def say(message: str) -> None:
    """One agent line on the pod log (steps' own output is interleaved, prefixed by step name)."""
    sys.stdout.write(f"noderoll-agent: {message}\n")
    sys.stdout.flush()


def _flag_path(state: Path, mode: str, step: Step) -> Path:
    # Like NodeWright, the flag names the step's path, arguments and accepted codes, so a changed
    # step definition within the same version runs again.
    digest = hashlib.sha256(json.dumps([step.path, step.arguments, step.returncodes]).encode()).hexdigest()
    return state / "flags" / mode / f"{step.name}-{digest[:12]}.complete"


def _copy_files(source: Path | None, target: Path) -> None:
    target.mkdir(exist_ok=True)
    if source is None or not source.is_dir():
        return
    for item in sorted(source.iterdir()):
        # ConfigMap volumes hold `..data` symlinks and hidden dirs: copy only the visible files.
        if not item.name.startswith(".") and item.is_file():
            shutil.copyfile(item, target / item.name)


def _stage_package(request: RunRequest, state: Path, steps: tuple[Step, ...]) -> Path:
    """Copy the package, its config files (`configmaps/`) and the node's metadata (`node-metadata/`)
    next to its flags on the host, and make the staged step files executable."""
    staged = state / "package"
    if staged.exists():
        shutil.rmtree(staged)
    shutil.copytree(request.package_dir, staged, symlinks=True)
    _copy_files(request.config_dir, staged / "configmaps")
    if request.metadata_dir is not None:
        _copy_files(request.metadata_dir, staged / "node-metadata")
    for step in steps:
        path = step_file(staged, step)
        # NodeWright chmods every step before running it: images built without the bit still work.
        path.chmod(path.stat().st_mode | EXECUTABLE_BITS)
    return staged


def _check_inputs(request: RunRequest, steps: tuple[Step, ...]) -> None:
    if not request.host.root.is_dir():
        raise AgentError(EXIT_HOST, f"host root {request.host.root} is not a directory")
    for step in steps:
        path = step_file(request.package_dir, step)
        if not path.is_file():
            raise AgentError(EXIT_STEP_NOT_FOUND, f"step {step.name}: {step.path} not found in the package")
    if request.mode.startswith("uninstall"):
        return
    for name in request.config.expected_config_files:
        if request.config_dir is None or not (request.config_dir / name).is_file():
            raise AgentError(EXIT_CONFIG_FILE_MISSING, f"expected config file {name} is missing")


def _history_file(request: RunRequest) -> Path:
    return request.host.state_root / request.package / "history.json"


def previous_version(request: RunRequest) -> str:
    """The version installed before: noderoll's history, else NodeWright's, else `unknown`."""
    recorded = read_history(request).get("current-version")
    if isinstance(recorded, str) and recorded:
        return recorded
    return nodewright.installed_version(request.host, request.config) or UNKNOWN_VERSION


def read_history(request: RunRequest) -> dict[str, Any]:
    """The package's install history (`current-version`, `history`); empty when none or garbage."""
    try:
        data = json.loads(_history_file(request).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _record_history(request: RunRequest, state: Path) -> None:
    history = read_history(request)
    current = UNINSTALLED if request.mode == "uninstall-check" else request.version
    entries = history.get("history") if isinstance(history.get("history"), list) else []
    entries.append({"version": current, "mode": request.mode, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    path = _history_file(request)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"current-version": current, "history": entries}, indent=1), encoding="utf-8")
    if current == UNINSTALLED:
        shutil.rmtree(state / "flags", ignore_errors=True)


def _arguments(request: RunRequest, step: Step, previous: str) -> list[str]:
    args: list[str] = []
    for arg in step.arguments:
        if arg.startswith("env:"):
            name = arg[4:]
            if name not in os.environ:
                raise AgentError(EXIT_CONFIG_INVALID, f"step {step.name}: argument {arg} but {name} is not set")
            args.append(os.environ[name])
        else:
            args.append(arg)
    if step.upgrade_step:
        args += [previous, request.version]
    return args


def _step_env(request: RunRequest, step: Step, staged: Path, previous: str) -> dict[str, str]:
    host = request.host
    env = {**os.environ, **step.env}
    env.update(
        NODEROLL_ROOT=host.root_for_steps,
        NODEROLL_PACKAGE=request.package,
        NODEROLL_VERSION=request.version,
        NODEROLL_MODE=request.mode,
        NODEROLL_PACKAGE_DIR=host.visible(staged),
        NODEROLL_CONFIG_DIR=host.visible(staged / "configmaps"),
        NODEROLL_STATE_DIR=host.visible(staged.parent),
        # NodeWright compatibility: its steps read $SKYHOOK_DIR/configmaps/<key>.
        SKYHOOK_DIR=host.visible(staged),
        STEP_ROOT=host.visible(staged / "skyhook_dir"),
        # NodeWright gives 0 to a node outside its ordering; the stage pod sets the real position.
        SKYHOOK_NODE_ORDER=os.environ.get("SKYHOOK_NODE_ORDER") or "0",
    )
    if request.mode.startswith("upgrade"):
        env.update(CURRENT_VERSION=request.version, PREVIOUS_VERSION=previous)
    return env


def _run_step(request: RunRequest, step: Step, staged: Path, term: _Terminated) -> int:
    """Run one step, streaming its output to the pod log and the host's step log; returns its exit
    code (negative: killed by a signal)."""
    host = request.host
    previous = previous_version(request)
    executable = host.visible(step_file(staged, step))
    cwd = host.visible(staged)

    def enter_root() -> None:  # runs in the child between fork and exec
        os.chroot(host.root)
        os.chdir(cwd)

    try:
        proc = subprocess.Popen(
            [executable, *_arguments(request, step, previous)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_step_env(request, step, staged, previous),
            cwd=None if host.chroot else cwd,
            preexec_fn=enter_root if host.chroot else None,  # noqa: PLW1509 - the agent is single-threaded
        )
    except PermissionError as err:
        # Staged steps are chmodded: a host folder mounted noexec is what refuses them.
        raise AgentError(EXIT_STEP_NOT_EXECUTABLE, f"step {step.name}: {executable} cannot be executed "
                                                   f"(noexec mount?): {err}") from err
    except (OSError, subprocess.SubprocessError) as err:
        # chroot refused (not root) or the interpreter of the script is missing on the host.
        raise AgentError(EXIT_HOST, f"step {step.name}: cannot start in {host.root}: {err}") from err
    term.child = proc
    log = steplogs.StepLog(steplogs.log_dir(host, request.package, request.version), step.path)
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            sys.stdout.write(f"[{step.name}] {line}\n")
            sys.stdout.flush()
            log.write(line)
        code = proc.wait()
        log.write(f"noderoll-agent: step {step.name} exited {code}")
    finally:
        log.close()
    term.child = None
    return code


def run_mode(request: RunRequest) -> int:
    """Run every step of the request's mode; returns 0 or raises AgentError with the exit code."""
    steps = request.config.steps(request.mode)
    if not steps:
        say(f"package {request.package} {request.version} has no steps for mode {request.mode}: nothing to do")
        return 0
    _check_inputs(request, steps)
    state = request.host.package_state(request.package, request.version)
    staged = _stage_package(request, state, steps)
    if not is_check(request.mode) and not request.mode.startswith("uninstall"):
        _copy_root_dir(staged, request.host.root)
    term = _Terminated()
    previous_handler = signal.signal(signal.SIGTERM, term.handle)
    try:
        failures = _run_steps(request, steps, staged, term)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    if term.flag:
        raise AgentError(EXIT_TERMINATED, f"terminated during mode {request.mode}")
    if failures:
        step, code = failures[0]
        reason = f"step {step.name} exited {code}, accepted {list(step.returncodes)}"
        if len(failures) > 1:
            reason += f" (and {len(failures) - 1} more failing check(s))"
        raise AgentError(code if 0 < code < 256 else EXIT_STEP_FAILED, reason)
    if is_check(request.mode):
        flag = state / "flags" / f"{request.mode}_ALL_CHECKED"
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()
        if request.mode in HISTORY_MODES:
            _record_history(request, state)
    say(f"mode {request.mode} of {request.package} {request.version}: {len(steps)} step(s) ok")
    return 0


def _run_steps(request: RunRequest, steps: tuple[Step, ...], staged: Path, term: _Terminated) -> list[tuple[Step, int]]:
    """Run steps in order; a non-check mode stops at the first failure, a check mode runs them all."""
    failures: list[tuple[Step, int]] = []
    journal = staged.parent / "history.jsonl"
    for step in steps:
        if term.flag:
            raise AgentError(EXIT_TERMINATED, f"terminated before step {step.name}")
        flag = _flag_path(staged.parent, request.mode, step)
        once = not (is_check(request.mode) or request.mode in ALWAYS_RERUN_MODES or step.idempotence)
        if once and flag.exists():
            say(f"skipping step {step.name}: already completed for {request.package} {request.version}")
            _journal(journal, request.mode, step, {"outcome": "skipped"})
            continue
        foreign = nodewright.completed_flag(request.host, request.config, step) if once else None
        if foreign is not None:
            say(f"skipping step {step.name}: completed under NodeWright ({request.host.visible(foreign)})")
            _journal(journal, request.mode, step, {"outcome": "skipped", "nodewrightFlag": request.host.visible(foreign)})
            continue
        say(f"running step {step.name} ({step.path}) for mode {request.mode}")
        started = time.monotonic()
        code = _run_step(request, step, staged, term)
        ok = code in step.returncodes
        seconds = round(time.monotonic() - started, 3)
        _journal(journal, request.mode, step, {"outcome": "ok" if ok else "failed", "exitCode": code, "seconds": seconds})
        if ok:
            if once:
                flag.parent.mkdir(parents=True, exist_ok=True)
                flag.touch()
            continue
        failures.append((step, code))
        if not is_check(request.mode):
            break
    return failures


def _journal(path: Path, mode: str, step: Step, result: dict[str, Any]) -> None:
    """Append one line to the version's step journal (`history.jsonl`)."""
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "mode": mode, "step": step.name, **result}
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def _copy_root_dir(staged: Path, root: Path) -> None:
    """NodeWright's `root_dir/`: static files copied onto the host root."""
    source = staged / "root_dir"
    if source.is_dir():
        shutil.copytree(source, root, dirs_exist_ok=True, symlinks=True)
