"""Outside availability changes of Nodes, gathered per fleet and handed over in bursts. Pure (time is given).

The bridge notes every Node change that changes a node's availability by someone else's hand
(`crd_bridge.node_changes.availability_change`) for the fleets one of whose Packages targets the
node; `due_in` says when the notes are to be sent (`coalesce_seconds` after the first note of a
burst), and `take` hands them over once due: one `protocol.fleet.AvailabilityChanged` per fleet
carrying every node noted for it since. Forty nodes turning NotReady within a second cost each of
their fleets one signal, and the first of them reaches its fleets within `coalesce_seconds`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.fleet import AvailabilityChanged

COALESCE_SECONDS = 1.0


@dataclass
class AvailabilityNotes:
    """The nodes noted per fleet since the last hand-over, and when the first of them was noted."""

    coalesce_seconds: float = COALESCE_SECONDS
    pending: dict[str, set[str]] = field(default_factory=dict)
    # Monotonic time of the burst's first note (None: nothing pending).
    first_at: float | None = None

    def note(self, fleets: Iterable[str], node: str, now: float) -> None:
        """Remember that `node`'s availability changed, for each of `fleets`."""
        for fleet in fleets:
            self.pending.setdefault(fleet, set()).add(node)
            if self.first_at is None:
                self.first_at = now

    def due_in(self, now: float) -> float | None:
        """Seconds until the notes are due (0: now), None when nothing is pending."""
        if self.first_at is None:
            return None
        return max(0.0, self.first_at + self.coalesce_seconds - now)

    def take(self, now: float) -> dict[str, AvailabilityChanged]:
        """Fleet -> its signal, when the notes are due (then forgotten); {} before."""
        if self.due_in(now) != 0.0:
            return {}
        taken, self.pending, self.first_at = self.pending, {}, None
        return {fleet: AvailabilityChanged(sorted(nodes)) for fleet, nodes in sorted(taken.items())}
