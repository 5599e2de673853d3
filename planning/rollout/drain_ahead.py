"""Drain-ahead: which nodes a fleet marks `noderoll.io/upcoming`, and when their windows may start. Pure.

`spec.drainAhead: {seconds: S, taint}` (ADR 0015) tells the schedulers ahead which nodes are next,
so a node picked for the next batch stops receiving new long jobs before it is cordoned:

* a node's window starts at the earliest S seconds after the node was marked (`plan(...).ready`);
  a batch whose nodes were not marked in time waits for them (the first batch of a wave waits S);
* while a batch is out, the fleet predicts the next one (the same planner on a copy, as if the
  batch out succeeds: `planning.rollout.fleet_state.preview_next`) and marks its nodes S seconds before it
  is expected to start: the latest hand-over of the batch out plus the median time this fleet's
  windows took (`expected_start`; the canary's soak added after a canary, none known: at once);
  so later batches usually start without waiting;
* a node stays marked while its window is out, while it is in the batch to send or the
  predicted one, and while it waits after its budget no longer held at hand-out (`held`); otherwise the mark goes: after its window answered, or when it leaves the plan
  (the fleet paused, halted, rolling back or outside its maintenance windows, the node no longer
  wanted, the prediction changed, drainAhead removed from the policy, the fleet ending). Removals
  while other windows of the fleet are still out are gathered: written with the next marks, once
  none is out, or `UNMARK_EVERY` after the fleet's last write, so a batch costs a few activities,
  not one per node.

The marks on the Node (`owners_after`): the annotation `noderoll.io/upcoming-for` holds one entry per
fleet that wants the node marked, `{"fleet/<policy>": {"taint": bool}}`; the label
`noderoll.io/upcoming=true` is there while any fleet wants it, the taint
`noderoll.io/upcoming:PreferNoSchedule` while any wants the taint. Each fleet adds and removes
only its own entry, so two fleets sharing a node do not take each other's mark away.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Window durations a fleet keeps for its estimate (the most recent ones).
DURATIONS_KEPT = 20
# Removals wait at most this long for the fleet's next write while its other windows are out.
UNMARK_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class AheadInput:
    """What the fleet knows when it decides its marks."""

    seconds: int
    now: datetime
    # node -> RFC 3339 time its mark was written (the fleet's `FleetState.upcoming`).
    marked: Mapping[str, str] = field(default_factory=dict)
    in_flight: Collection[str] = ()
    # Nodes of the batch out that may be handed over now but were not yet.
    to_send: Collection[str] = ()
    # The predicted next batch and when it is expected to start (None: not predictable now).
    next_batch: Collection[str] = ()
    next_start: datetime | None = None
    # When the fleet last wrote marks (None: not in this run).
    last_write: datetime | None = None
    # Nodes held back at hand-out (their budget did not hold on a fresh read): they keep their marks.
    held: Collection[str] = ()


@dataclass(frozen=True)
class AheadPlan:
    """Marks to write and remove, the nodes of `to_send` whose S seconds have passed, the next wake-up."""

    mark: list[str] = field(default_factory=list)
    unmark: list[str] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    wake_at: datetime | None = None


def plan(data: AheadInput) -> AheadPlan:
    """The module's rules for one moment (seconds 0: drain-ahead off, every mark goes, every node ready)."""
    if data.seconds <= 0:
        return AheadPlan(unmark=sorted(data.marked), ready=sorted(data.to_send))
    ahead = timedelta(seconds=data.seconds)
    due = data.next_start is not None and data.now >= data.next_start - ahead
    wanted = set(data.in_flight) | set(data.to_send) | set(data.held) | (set(data.next_batch) if due else set())
    # A window already out gains nothing from a mark: only nodes still to come are marked.
    mark = sorted((set(data.to_send) | (set(data.next_batch) if due else set())) - set(data.marked))
    unmark = sorted(set(data.marked) - wanted)
    ready, wakes = [], []
    gather_until = data.last_write + UNMARK_EVERY if data.last_write is not None else None
    if unmark and not mark and data.in_flight and gather_until is not None and data.now < gather_until:
        unmark = []
        wakes.append(gather_until)
    for node in sorted(data.to_send):
        since = data.marked.get(node)
        if since is not None and datetime.fromisoformat(since) + ahead <= data.now:
            ready.append(node)
        else:
            wakes.append((datetime.fromisoformat(since) if since else data.now) + ahead)
    if data.next_start is not None and not due and data.next_batch:
        wakes.append(data.next_start - ahead)
    return AheadPlan(mark, unmark, ready, min(wakes) if wakes else None)


def expected_start(sent_at: str, durations: Sequence[float], extra_seconds: float = 0) -> datetime | None:
    """When the next batch is expected: the batch out's latest hand-over, plus the median window time this
    fleet has seen (0 when none), plus `extra_seconds` (a canary's soak). None without a hand-over."""
    if not sent_at:
        return None
    median = statistics.median(durations) if durations else 0.0
    return datetime.fromisoformat(sent_at) + timedelta(seconds=median + extra_seconds)


def keep_duration(durations: list[float], seconds: float) -> None:
    """Remember one answered window's duration (the most recent `DURATIONS_KEPT`)."""
    durations.append(round(seconds, 1))
    del durations[:-DURATIONS_KEPT]


@dataclass(frozen=True)
class UpcomingMarks:
    """What a Node should show after one fleet's claim changed."""

    owners: dict[str, dict[str, bool]]
    label: bool
    taint: bool

    def annotation(self) -> str | None:
        """The `noderoll.io/upcoming-for` value (None: remove it)."""
        return json.dumps(self.owners, sort_keys=True, separators=(",", ":")) if self.owners else None


def owners_after(annotation: str, fleet: str, want: bool, taint: bool) -> UpcomingMarks:
    """The marks after `fleet` claims the node (`want`, with or without the taint) or gives its claim up.

    An annotation that does not read as `{fleet: {"taint": bool}}` counts as no claim (a hand edit: the
    next claim writes it again).
    """
    try:
        parsed = json.loads(annotation) if annotation else {}
    except ValueError:
        parsed = {}
    owners = {str(k): {"taint": bool(v.get("taint"))} for k, v in parsed.items()
              if isinstance(v, dict)} if isinstance(parsed, dict) else {}
    if want:
        owners[fleet] = {"taint": taint}
    else:
        owners.pop(fleet, None)
    return UpcomingMarks(owners, bool(owners), any(v["taint"] for v in owners.values()))
