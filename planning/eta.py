"""How long a fleet's remaining batches will take: the ETA of `noderoll plan`, `noderoll status`, the
statuses and the gauge. Pure (no I/O; times are RFC 3339 strings handed in).

What a fleet measures (`Timings`, kept in `planning.fleet_state.FleetState`, bounded):
* per window kind (the merged interrupt that ran: `reboot`, `service`, `restartAllServices`, `noop`,
  or `none`), the durations of its latest successful windows, from the hand-over (`InFlight.sent_at`)
  to the answer (the fleet's clock when it records the answer);
* the gaps between batches: from a batch's evaluation to the next batch's hand-out (listing,
  gates, the hand-over itself).

The estimate (`estimate`): batches run one after the other (a batch barrier, `planning.batches`),
so a batch takes its longest window plus one gap. A window is estimated by the p50 of its kind's
measured windows; a kind never measured (a fresh fleet) gets the defaults, per stage, per drain and
per interrupt (`DEFAULTS`), and the ETA says so (`source`). A window already out counts what is
left of its estimate (at least nothing). A canary still to soak adds its soak. Assumed: every
window succeeds (no retries, no halts), no maintenance window or gate holds a batch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Measurements kept per kind, and gaps kept: enough for a stable p50, small in the fleet's history.
KEPT = 20
NO_INTERRUPT = "none"
DEFAULT_SOURCE = "defaults"


@dataclass(frozen=True)
class Defaults:
    """What a window is assumed to take before the fleet measured one of its kind (seconds)."""

    stage: float = 60.0  # a stage and its check, in its pod
    drain: float = 60.0
    reboot: float = 300.0
    service: float = 30.0  # a service restart (service, restartAllServices)
    gap: float = 10.0  # between batches: the re-listing and the hand-over


DEFAULTS = Defaults()


@dataclass
class Timings:
    """Durations a fleet measured (module docstring); plain data, carried with the fleet's state."""

    # Window kind -> the latest durations in seconds (at most KEPT each).
    windows: dict[str, list[float]] = field(default_factory=dict)
    # Seconds from a batch's evaluation to the next batch's hand-out (at most KEPT).
    gaps: list[float] = field(default_factory=list)
    # RFC 3339 time the last batch was evaluated; "" once the next batch went out.
    batch_ended: str = ""


@dataclass(frozen=True)
class WindowShape:
    """What one node's window will do: its kind (merged interrupt), its stages, whether it drains."""

    kind: str = NO_INTERRUPT
    stages: int = 0
    drain: bool = False


@dataclass(frozen=True)
class Running:
    """A window already out: its shape and how long it has been out (seconds)."""

    shape: WindowShape
    elapsed: float


@dataclass(frozen=True)
class EtaInput:
    """Everything the estimate depends on."""

    # The batches still to hand out, in order; each is the shapes of its nodes' windows.
    batches: Sequence[Sequence[WindowShape]]
    timings: Timings
    # RFC 3339 time the estimate is made at.
    now: str
    # The windows of the batch that is out now (empty: none).
    running: Sequence[Running] = ()
    # Canary soak still ahead (seconds).
    soak_seconds: float = 0.0
    defaults: Defaults = DEFAULTS


@dataclass
class Eta:
    """An estimate of when the fleet's wave ends."""

    # RFC 3339, rounded to the minute ("" when nothing is left).
    finish_at: str = ""
    seconds_left: float = 0.0
    batches_left: int = 0
    windows_left: int = 0
    # Window kind -> the seconds assumed for it (measured p50, or the default for a shape of that kind).
    window_seconds: dict[str, float] = field(default_factory=dict)
    gap_seconds: float = 0.0
    # "measured: ..." or "defaults: ..." (module docstring).
    source: str = DEFAULT_SOURCE
    assumes: str = "every window succeeds; no retry, halt, maintenance window or gate holds a batch"


def kind_of(interrupt: str) -> str:
    """The window kind of a merged interrupt type ("" = none ran)."""
    return interrupt or NO_INTERRUPT


def _keep(values: list[float], value: float) -> None:
    values.append(round(value, 1))
    del values[:-KEPT]


def seconds_between(start: str, end: str) -> float | None:
    """Seconds from `start` to `end` (RFC 3339); None when either is missing."""
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def record_window(timings: Timings, interrupt: str, sent_at: str, answered_at: str) -> None:
    """A successful window answered: keep its duration under its kind."""
    seconds = seconds_between(sent_at, answered_at)
    if seconds is not None and seconds >= 0:
        _keep(timings.windows.setdefault(kind_of(interrupt), []), seconds)


def record_batch_end(timings: Timings, now: str) -> None:
    """A batch was evaluated (or a canary promoted): the gap to the next hand-out starts."""
    timings.batch_ended = now


def record_hand_out(timings: Timings, now: str) -> None:
    """A batch went out: the gap since the last batch's evaluation is measured."""
    seconds = seconds_between(timings.batch_ended, now)
    if seconds is not None and seconds >= 0:
        _keep(timings.gaps, seconds)
    timings.batch_ended = ""


def default_seconds(shape: WindowShape, defaults: Defaults = DEFAULTS) -> float:
    """A window of `shape` by the defaults: its stages, its drain and its interrupt."""
    seconds = shape.stages * defaults.stage + (defaults.drain if shape.drain else 0.0)
    if shape.kind == "reboot":
        seconds += defaults.reboot
    elif shape.kind in ("service", "restartAllServices"):
        seconds += defaults.service
    return seconds


def window_seconds(shape: WindowShape, timings: Timings, defaults: Defaults = DEFAULTS) -> float:
    """The p50 of the measured windows of the shape's kind, else the defaults for the shape."""
    measured = timings.windows.get(shape.kind)
    return float(statistics.median(measured)) if measured else default_seconds(shape, defaults)


def _source(data: EtaInput, kinds: set[str]) -> str:
    measured = {k: v for k, v in data.timings.windows.items() if k in kinds and v}
    missing = sorted(kinds - set(measured))
    parts = [f"{k} p50 {statistics.median(v):.0f}s of {len(v)} window(s)" for k, v in sorted(measured.items())]
    d = data.defaults
    if missing:
        parts.append(f"defaults for {', '.join(missing)} (never measured here: {d.stage:.0f}s per stage, "
                     f"{d.drain:.0f}s per drain, {d.reboot:.0f}s per reboot, {d.service:.0f}s per service restart)")
    return ("measured: " if measured else "defaults: ") + "; ".join(parts) if parts else DEFAULT_SOURCE


def _minute(moment: datetime) -> str:
    rounded = moment.replace(second=0, microsecond=0) + (timedelta(minutes=1) if moment.second >= 30 else timedelta())
    return rounded.isoformat()


def estimate(data: EtaInput) -> Eta:
    """When the batches still ahead end (module rules)."""
    defaults = data.defaults
    gap = float(statistics.median(data.timings.gaps)) if data.timings.gaps else defaults.gap
    shapes = [s for batch in data.batches for s in batch] + [r.shape for r in data.running]
    kinds = {s.kind for s in shapes}
    seconds = 0.0
    if data.running:
        seconds += max(max(window_seconds(r.shape, data.timings, defaults) - r.elapsed, 0.0) for r in data.running)
    seconds += data.soak_seconds
    for batch in data.batches:
        if batch:
            seconds += gap + max(window_seconds(s, data.timings, defaults) for s in batch)
    if not shapes:
        return Eta(source=_source(data, kinds))
    return Eta(
        finish_at=_minute(datetime.fromisoformat(data.now) + timedelta(seconds=seconds)),
        seconds_left=round(seconds, 1),
        batches_left=sum(1 for b in data.batches if b) + (1 if data.running else 0),
        windows_left=len(shapes),
        window_seconds={k: round(window_seconds(next(s for s in shapes if s.kind == k), data.timings, defaults), 1)
                        for k in sorted(kinds)},
        gap_seconds=round(gap, 1),
        source=_source(data, kinds),
    )


def duration_text(seconds: float) -> str:
    """`1h05m`, `12m30s`, `45s`: a duration for tables."""
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
