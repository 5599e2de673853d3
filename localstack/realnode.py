"""One real Kubernetes node: this machine, with kubelet, containerd and runc. Does I/O (processes, mounts).

For the real-node test tier (tests/realnode). Everything runs from a private state folder:

* containerd (Debian's package) with its own config: root, state, socket, runc root and CNI
  configuration in the state folder, the CNI plugins of Debian's `containernetworking-plugins`
  (a bridge of its own, no NAT, no iptables rules), and a sandbox ("pause") image built locally.
  Where this process lacks CAP_SYS_RESOURCE (root in some VMs and containers), a container's
  oom_score_adj cannot be lowered (runc fails "failed to update /proc/self/oom_score_adj:
  Permission denied" for the pod sandbox's -998): containerd then runs with
  `restrict_oom_score_adj`, which keeps every container at or above containerd's own score;
* the kubelet built from the same Debian source package as the control plane
  (`localstack.provision.kubelet_binary`), registering this machine as node `<name>` (InternalIP:
  the machine's address; a kubelet refuses a loopback one), serving on 127.0.0.1 only, cgroupfs driver, no QoS cgroups, no iptables
  chains, no image garbage collection (the images cannot be pulled again);
* images built locally (`localstack.rootfs`, `localstack.oci`) and loaded with `ctr images import`:
  no registry is ever contacted.

What a kubelet necessarily touches outside the state folder, and how `stop` puts it back: the kernel
parameters the kubelet sets at start (`vm.overcommit_memory`, `kernel.panic`, ... ; restored),
`/var/log/pods` and `/var/log/containers` (entries it created are removed), containerd's shim
sockets under `/run/containerd/s` (removed), CNI results under `/var/lib/cni` (removed), the
bridge interface (deleted), per-container cgroups (gone with the containers). The stage pods' agent
writes its state and step logs on the host (`/var/lib/noderoll`, `/var/log/noderoll/steps`):
entries created during the run are removed too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from localstack import processes
from localstack.provision import ProvisionError, kubelet_binary
from localstack.state import ComponentInfo

APT_PACKAGES = {"containerd": "containerd", "runc": "runc", "/usr/lib/cni/bridge": "containernetworking-plugins",
                "/bin/busybox": "busybox-static"}
CNI_BIN_DIR = Path("/usr/lib/cni")
PAUSE_IMAGE = "noderoll.local/pause:1"
REQUIRED_CGROUPS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")
CAP_SYS_RESOURCE = 24
# What the kubelet (1.20) writes at start unless --protect-kernel-defaults (then it refuses to start).
KERNEL_TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
# Host folders whose new entries a run leaves behind; `stop` removes exactly those.
FOOTPRINT_DIRS = ("/var/log/pods", "/var/log/containers", "/run/containerd/s", "/var/lib/cni/results",
                  "/var/lib/cni/networks", "/var/lib/noderoll", "/var/log/noderoll/steps")


class RealNodeError(RuntimeError):
    """The real node cannot run here; the message is the exact reason (the tier skips with it)."""


def _missing_packages(wanted: dict[str, str]) -> list[str]:
    return sorted({pkg for path, pkg in wanted.items()
                   if not (Path(path).exists() if path.startswith("/") else shutil.which(path))})


def install_packages(wanted: dict[str, str] = APT_PACKAGES) -> None:
    """apt-get install what is missing of `wanted` (path or command -> Debian package; default: containerd,
    runc, the CNI plugins and busybox-static)."""
    missing = _missing_packages(wanted)
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RealNodeError(f"missing Debian packages {', '.join(missing)} and no root apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
    result = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                            check=False, env=env, capture_output=True, text=True)
    if _missing_packages(wanted):
        raise RealNodeError(f"apt-get install {' '.join(missing)} failed: {result.stderr.strip()[-400:]}")


def has_capability(bit: int) -> bool:
    """Whether this process holds a capability (CapEff of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def unsupported_reason() -> str:
    """"" when a kubelet can run on this machine, else why not (checked without starting anything)."""
    if os.uname().sysname != "Linux":
        return f"a kubelet needs Linux, this is {os.uname().sysname}"
    if os.geteuid() != 0:
        return f"a kubelet, containerd and runc need root (uid {os.geteuid()})"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlay filesystem (containerd's overlayfs snapshotter)"
    cgroups = Path("/sys/fs/cgroup")
    if (cgroups / "cgroup.controllers").is_file():
        return ""  # cgroup v2: every controller in one hierarchy
    missing = [c for c in REQUIRED_CGROUPS if not (cgroups / c).is_dir()]
    if missing:
        return f"cgroup v1 controllers {', '.join(missing)} are not mounted under {cgroups}"
    return ""


def provision() -> Path:
    """Install the Debian packages and find (or build) the kubelet; raises RealNodeError."""
    reason = unsupported_reason()
    if reason:
        raise RealNodeError(reason)
    install_packages()
    try:
        return kubelet_binary()
    except ProvisionError as err:
        raise RealNodeError(str(err)) from err


@dataclass
class Footprint:
    """What the run changes outside its state folder, recorded before it starts."""

    entries: dict[str, set[str]] = field(default_factory=dict)
    tunables: dict[str, str] = field(default_factory=dict)
    # Folders (of FOOTPRINT_DIRS and their parents) that did not exist: removed again when empty.
    absent: list[str] = field(default_factory=list)

    @classmethod
    def record(cls) -> Footprint:
        entries = {d: set(os.listdir(d)) if os.path.isdir(d) else set() for d in FOOTPRINT_DIRS}
        tunables = {}
        for name in KERNEL_TUNABLES:
            with contextlib.suppress(OSError):
                tunables[name] = (Path("/proc/sys") / name).read_text().strip()
        folders = {str(p) for d in FOOTPRINT_DIRS for p in [Path(d), *Path(d).parents] if len(p.parts) > 3}
        absent = sorted((f for f in folders if not os.path.exists(f)), key=len, reverse=True)
        return cls(entries, tunables, absent)

    def restore(self) -> list[str]:
        """Remove entries that appeared, put the kernel parameters back; returns what was done."""
        done = []
        for folder, before in self.entries.items():
            if not os.path.isdir(folder):
                continue
            for name in sorted(set(os.listdir(folder)) - before):
                path = Path(folder) / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                done.append(str(path))
        for name, value in self.tunables.items():
            target = Path("/proc/sys") / name
            with contextlib.suppress(OSError):
                if target.read_text().strip() != value:
                    target.write_text(value)
                    done.append(f"{name}={value}")
        for folder in self.absent:  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(folder)
                done.append(folder)
        return done


@dataclass
class RealNode:
    """This machine as node `name` of the cluster behind `kubeconfig`, run from `state_dir`."""

    state_dir: Path
    kubeconfig: Path
    name: str = field(default_factory=lambda: f"realnode-{uuid.uuid4().hex[:8]}")
    components: dict[str, ComponentInfo] = field(default_factory=dict)
    footprint: Footprint | None = None

    @property
    def socket(self) -> Path:
        """containerd's CRI/API socket."""
        return self.state_dir / "containerd" / "containerd.sock"

    @property
    def bridge(self) -> str:
        """The CNI bridge interface of this node (at most 15 characters)."""
        return "nr" + self.name.rsplit("-", 1)[-1][:8]

    def _write_configs(self) -> Path:
        base = self.state_dir / "containerd"
        cni = self.state_dir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        octet = int(self.bridge[-2:], 16) % 200 + 20
        conflist = {"cniVersion": "0.4.0", "name": "noderoll-realnode", "plugins": [{
            "type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": f"10.213.{octet}.0/24"}]],
                     "dataDir": str(cni / "ipam")}}]}
        (cni / "net.d" / "10-noderoll.conflist").write_text(json.dumps(conflist, indent=1))
        config = base / "config.toml"
        base.mkdir(parents=True, exist_ok=True)
        config.write_text(f'''version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = {"false" if has_capability(CAP_SYS_RESOURCE) else "true"}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{self.state_dir / 'runc'}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni / 'net.d'}"
''')
        return config

    def start_containerd(self) -> None:
        """Start containerd on the private socket and wait for it to answer."""
        self.footprint = self.footprint or Footprint.record()
        config = self._write_configs()
        launch = processes.Launch("containerd", [shutil.which("containerd") or "containerd", "--config", str(config)],
                                  {}, self.state_dir / "logs" / "containerd.log", die_with_parent=True)
        self.components["containerd"] = processes.start(launch)
        deadline = time.monotonic() + 30
        if not processes.wait_until(lambda: self.ctr(["version"], check=False).returncode == 0, deadline,
                                    self.components["containerd"]):
            raise RealNodeError(f"containerd did not start: {self.log_tail('containerd')}")

    def ctr(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """`ctr` against this node's containerd, namespace k8s.io (the kubelet's)."""
        argv = [shutil.which("ctr") or "ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if check and result.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)} failed: {result.stderr.strip()[-600:]}")
        return result

    def import_image(self, archive: Path) -> None:
        """Load an OCI archive (`localstack.oci.write_archive`) into containerd, unpacked."""
        self.ctr(["images", "import", "--no-unpack=false", str(archive)])

    def start_kubelet(self, kubelet: Path, labels: dict[str, str] | None = None) -> None:
        """Start the kubelet; the node registers itself (wait for Ready through the API)."""
        root = self.state_dir / "kubelet"
        port = processes.pick_port([None], set())
        healthz = processes.pick_port([None], {port})
        node_labels = ",".join(f"{k}={v}" for k, v in {"noderoll.io/realnode": "true", **(labels or {})}.items())
        argv = [
            str(kubelet), f"--kubeconfig={self.kubeconfig}", "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{self.socket}", "--runtime-request-timeout=5m",
            f"--root-dir={root}", f"--cert-dir={root / 'pki'}", f"--hostname-override={self.name}",
            "--address=127.0.0.1", f"--port={port}", "--read-only-port=0",
            "--healthz-bind-address=127.0.0.1", f"--healthz-port={healthz}",
            "--anonymous-auth=true", "--authorization-mode=AlwaysAllow", f"--node-labels={node_labels}",
            "--cgroup-driver=cgroupfs", "--cgroups-per-qos=false", "--enforce-node-allocatable=",
            "--fail-swap-on=false", "--make-iptables-util-chains=false",
            "--eviction-hard=memory.available<1Mi,nodefs.available<1%,imagefs.available<1%",
            "--image-gc-high-threshold=100", "--image-gc-low-threshold=99",
            f"--pod-infra-container-image={PAUSE_IMAGE}", "--serialize-image-pulls=false", "--max-pods=30",
            f"--volume-plugin-dir={root / 'volume-plugins'}", f"--seccomp-profile-root={root / 'seccomp'}",
            "--register-node=true", "--v=1",
        ]
        launch = processes.Launch("kubelet", argv, {"port": port, "healthz": healthz},
                                  self.state_dir / "logs" / "kubelet.log", die_with_parent=True)
        self.components["kubelet"] = processes.start(launch)

    def log_tail(self, component: str, lines: int = 15) -> str:
        """The last lines of a component's log (for error messages)."""
        try:
            text = (self.state_dir / "logs" / f"{component}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _kill_containers(self) -> None:
        tasks = self.ctr(["tasks", "list", "--quiet"], check=False).stdout.split()
        for task in tasks:
            self.ctr(["tasks", "kill", "--signal", "SIGKILL", "--all", task], check=False)
        for task in tasks:
            self.ctr(["tasks", "delete", "--force", task], check=False)

    def _unmount_all(self) -> None:
        marker = str(self.state_dir.resolve())
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for target in sorted((m for m in mounts if m.startswith(marker)), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], check=False, capture_output=True)

    def stop(self) -> list[str]:
        """Stop everything, remove what the run left on the machine; returns what was cleaned."""
        kubelet = self.components.pop("kubelet", None)
        if kubelet is not None:
            processes.stop(kubelet, timeout=15)
        if "containerd" in self.components:
            self._kill_containers()
            processes.stop(self.components.pop("containerd"), timeout=15)
        stray = processes.stray_processes(self.state_dir, ["containerd-shim-runc-v2", "containerd-shim", "runc"])
        processes.kill_processes(stray)
        self._unmount_all()
        subprocess.run(["ip", "link", "delete", self.bridge], check=False, capture_output=True)
        cleaned = self.footprint.restore() if self.footprint else []
        return cleaned
