"""The host root the agent works on: paths as the agent sees them and as a step sees them. Pure.

On a real node the host is mounted at `/host` and steps run in a chroot, so a step sees
`/var/lib/...` where the agent sees `/host/var/lib/...`. In simulation the root is a sandbox
directory and steps run without a chroot, so both see the same absolute path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STATE_SUBDIR = Path("var/lib/noderoll")
INTERRUPTS_LOG = "interrupts.log"
RESTARTED_SERVICES_LOG = "restarted-services.log"


@dataclass(frozen=True)
class Host:
    """Where the host root is and whether steps enter it by chroot."""

    root: Path
    chroot: bool

    def visible(self, path: Path) -> str:
        """The path as a step sees it (inside the chroot when there is one)."""
        if not self.chroot:
            return str(path)
        return "/" + str(path.relative_to(self.root))

    @property
    def root_for_steps(self) -> str:
        """The value of NODEROLL_ROOT given to steps."""
        return "/" if self.chroot else str(self.root)

    @property
    def state_root(self) -> Path:
        """`<root>/var/lib/noderoll`: every flag, history and record of the agent."""
        return self.root / STATE_SUBDIR

    def package_state(self, package: str, version: str) -> Path:
        """Per package version: flags, history and the staged package copy."""
        return self.state_root / package / version
