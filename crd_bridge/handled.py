"""What the bridge last told a Package's rollout, kept on the Package itself. Pure (no I/O).

Level-triggered reconciles must not resend `spec_changed` (a re-plan restarts the batches) or
`resume` (it also promotes a canary waiting for manual promotion and clears a halt) after a bridge
restart. So the bridge records, in the annotation `noderoll.io/last-handled` of the Package, the
Package uid, generation, policy revision and pause state it last handed to the rollout (the same
idea as kopf's `last-handled-configuration`). A missing or garbled record means "unknown".
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

LAST_HANDLED_ANNOTATION = "noderoll.io/last-handled"


@dataclass(frozen=True)
class LastHandled:
    """The Package state the rollout was last given (by start or signal)."""

    uid: str
    generation: int
    # `<policy name>@<policy generation>`, or "" when the Package names no policy.
    policy: str = ""
    paused: bool = False

    def dump(self) -> str:
        """The annotation value (compact JSON, stable key order)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def parse_last_handled(value: str | None) -> LastHandled | None:
    """The record in an annotation value, or None when absent or not a record we wrote."""
    if not value:
        return None
    try:
        data = json.loads(value)
        return LastHandled(
            uid=str(data["uid"]),
            generation=int(data["generation"]),
            policy=str(data.get("policy", "")),
            paused=bool(data.get("paused", False)),
        )
    except (ValueError, KeyError, TypeError):
        # Someone edited it by hand: treat as unknown (the safe reconcile resends the spec).
        return None
