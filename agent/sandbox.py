"""Confining a simulated node's steps to its sandbox directory (`--simulate`). Host I/O (mounts).

In simulation the "host root" is a directory of the machine running the simulator, and a step that
writes an absolute path (`/etc/x`, `/var/tmp/x`) must land in that directory, never on the machine.
So before running steps the agent enters a private mount namespace in which the sandbox gets this
machine's programs and libraries read-only (`/usr`, and `/bin`, `/sbin`, `/lib*` as on the machine:
symlinks into `usr` on a merged-/usr system, read-only bind mounts otherwise; and `/etc/alternatives`,
through which Debian's `/usr/bin/awk`, `which` and the like resolve: without it they are dangling
links in the sandbox, so a step's `awk` was "not found") and the harmless
character devices `/dev/null`, `/dev/zero`, `/dev/random`, `/dev/urandom`; every step then runs
chrooted into the sandbox (`agent.host.Host`). Nothing else of the machine is visible: no `/proc`,
`/sys`, `/dev` disks, `/etc` or `/home`, so a step cannot change kernel parameters or devices of
the machine either. The mounts exist only in the agent's namespace and vanish with it.

Not root: the namespace is entered as a user namespace mapping the caller's uid to root (where the
kernel allows unprivileged user namespaces). When neither works the agent refuses to run the steps
(exit 71) rather than run them unconfined. This guards the machine against packages that write
absolute paths, not against a hostile package: a root process can leave a chroot.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from agent.config import AgentError
from agent.modes import EXIT_HOST

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
# Mounted after WRITABLE_DIRS (etc/alternatives lies in the sandbox's own writable etc).
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc/alternatives")
DEVICES = ("null", "zero", "random", "urandom")
WRITABLE_DIRS = ("etc", "tmp", "var/tmp", "dev")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fail(what: str) -> AgentError:
    errno = ctypes.get_errno()
    return AgentError(EXIT_HOST, f"cannot confine the steps to the sandbox ({what}: {os.strerror(errno)}); "
                                 "refusing to run them on this machine")


def _mount(libc: ctypes.CDLL, source: str | None, target: Path | str, flags: int) -> None:
    if libc.mount(source.encode() if source else None, str(target).encode(), None, flags, None) != 0:
        raise _fail(f"mount {source or ''} {target}")


def _enter_namespace(libc: ctypes.CDLL) -> None:
    if os.geteuid() == 0:
        if libc.unshare(CLONE_NEWNS) != 0:
            raise _fail("unshare(CLONE_NEWNS)")
        return
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        raise _fail("unshare(CLONE_NEWUSER|CLONE_NEWNS) as a non-root user")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")


def _inside(root: Path, path: Path) -> None:
    """Refuse a mount target that resolves outside the sandbox (a symlink a step left behind)."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if real != real_root and not real.startswith(real_root + os.sep):
        raise AgentError(EXIT_HOST, f"sandbox path {path} resolves to {real}, outside the sandbox: refusing to run steps")


def _system_dir(libc: ctypes.CDLL, name: str, root: Path) -> None:
    machine, target = Path("/") / name, root / name
    if not machine.exists():
        return
    if machine.is_symlink():
        link = os.readlink(machine)
        if target.is_symlink() and os.readlink(target) == link:
            return
        if not target.exists() and not target.is_symlink():
            target.symlink_to(link)  # merged /usr: /bin -> usr/bin, resolved inside the chroot
            return
    if target.is_symlink():
        target.unlink()  # a link left in the sandbox: the machine's directory takes its place
    _inside(root, target)
    target.mkdir(parents=True, exist_ok=True)
    _mount(libc, str(machine.resolve()), target, MS_BIND | MS_REC)
    _mount(libc, None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def confine(root: Path) -> None:
    """Enter a private mount namespace where `root` holds this machine's programs read-only."""
    if root == Path("/"):
        raise AgentError(EXIT_HOST, "simulation needs a sandbox root other than /: refusing to run steps on this machine")
    libc = _libc()
    _enter_namespace(libc)
    # Nothing mounted here may propagate back to the machine's own mount table.
    _mount(libc, None, "/", MS_REC | MS_PRIVATE)
    for name in WRITABLE_DIRS:
        _inside(root, root / name)
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    for name in SYSTEM_DIRS:
        _system_dir(libc, name, root)
    for device in DEVICES:
        target = root / "dev" / device
        if target.is_symlink():
            target.unlink()
        if not target.exists():
            target.touch()
        _mount(libc, f"/dev/{device}", target, MS_BIND)
