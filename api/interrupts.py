"""Interrupt merging: one interrupt per node window, the strongest requested. Pure (no I/O).

Rules (NodeWright's `fudgeInterruptWithPriority`, kept):
* strength `reboot` > `restartAllServices` > `service` > `noop`; the merge is the strongest type
  requested by any package in the window;
* when the strongest is `service`, its services are the union of every `service` request's
  services, sorted and without duplicates (a reboot or a restart of all services covers them);
* no request gives no interrupt (`None`); `noop` still counts as an interrupt (the package asked
  for an interrupt window, e.g. to run `post-interrupt`), but it never needs a drain.
A merged interrupt needs a drain when its type disrupts workloads (anything but `noop`).
In `api` (like the cycle finder `api/graph.py`), below both of its users: the node plan
(`planning/node/node_plan.py`, the node workflow) and the NodeWright importer (`api/nodewright_interrupts.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from api.enums import InterruptType

# Higher is stronger.
STRENGTH: dict[InterruptType, int] = {
    InterruptType.NOOP: 0,
    InterruptType.SERVICE: 1,
    InterruptType.RESTART_ALL_SERVICES: 2,
    InterruptType.REBOOT: 3,
}


@dataclass(frozen=True)
class InterruptRequest:
    """An interrupt asked for by a package (or the merge of several)."""

    type: InterruptType
    services: tuple[str, ...] = field(default_factory=tuple)

    @property
    def disruptive(self) -> bool:
        """True when running it affects workloads, so the node is cordoned and drained first."""
        return self.type is not InterruptType.NOOP

    def to_env(self) -> str:
        """The `NODEROLL_INTERRUPT` value for the interrupt pod (stage pod contract)."""
        return json.dumps({"type": self.type.value, "services": list(self.services)})


def merge_interrupts(requests: Iterable[InterruptRequest | None]) -> InterruptRequest | None:
    """The single interrupt that satisfies every request (see module rules); None when none."""
    wanted = [r for r in requests if r is not None]
    if not wanted:
        return None
    strongest = max(wanted, key=lambda r: STRENGTH[r.type]).type
    if strongest is not InterruptType.SERVICE:
        return InterruptRequest(type=strongest)
    services = sorted({s for r in wanted if r.type is InterruptType.SERVICE for s in r.services})
    return InterruptRequest(type=InterruptType.SERVICE, services=tuple(services))
