"""How long a fleet's wave will take: what a fleet measures, what a window is assumed to take, and the ETA
of `noderoll plan`, `noderoll status`, the statuses and the gauge. Pure (no I/O; times are RFC 3339 strings).

What a fleet measures (`Timings`, kept in `planning.rollout.fleet_state.FleetState`, bounded):
* per window kind (the merged interrupt that ran: `reboot`, `service`, `restartAllServices`, `noop`,
  or `none`), the durations of its latest successful windows, from the hand-over (`InFlight.sent_at`)
  to the answer (the fleet's clock when it records the answer);
* the gaps between batches: from a batch's evaluation to the next batch's hand-out (listing,
  gates, the hand-over itself).

A window is estimated by the p50 of its kind's measured windows (`window_seconds`); a kind never
measured (a fresh fleet) gets the defaults, per stage, per drain and per interrupt (`DEFAULTS`), and
the ETA says so (`source_text`).

The ETA itself is the fleet's own machine run ahead on a simulated clock (`planning.views.simulate`,
ADR 0023): its batches, its rolling starts, its soak, drain-ahead's lead, its maintenance windows and
gate samples, every window succeeding. `simulated_eta` turns such a run into an `Eta`. An `Eta` is
computed at a moment (`computed_at`); `eta_at` moves it to the moment it is read: windows that were
out then and have run longer than assumed push the end back by as much (the status, the gauge and
`noderoll status` read it so, not as of the fleet's last workflow task).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
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
    assumes: str = "every window succeeds; no retry or halt; every gate sample passes"
    # RFC 3339 moment the estimate was made at, and the seconds from then until the windows out then
    # should have answered (`eta_at` moves the estimate by how late they are).
    computed_at: str = ""
    running_seconds: float = 0.0


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


def source_text(timings: Timings, kinds: set[str], defaults: Defaults = DEFAULTS) -> str:
    """What an estimate over windows of `kinds` rests on: the measured p50s, or the defaults (and which)."""
    measured = {k: v for k, v in timings.windows.items() if k in kinds and v}
    missing = sorted(kinds - set(measured))
    parts = [f"{k} p50 {statistics.median(v):.0f}s of {len(v)} window(s)" for k, v in sorted(measured.items())]
    d = defaults
    if missing:
        parts.append(f"defaults for {', '.join(missing)} (never measured here: {d.stage:.0f}s per stage, "
                     f"{d.drain:.0f}s per drain, {d.reboot:.0f}s per reboot, {d.service:.0f}s per service restart)")
    return ("measured: " if measured else "defaults: ") + "; ".join(parts) if parts else DEFAULT_SOURCE


def gap_seconds(timings: Timings, defaults: Defaults = DEFAULTS) -> float:
    """The p50 of the measured gaps between batches, else the default."""
    return float(statistics.median(timings.gaps)) if timings.gaps else defaults.gap


def _minute(moment: datetime) -> str:
    rounded = moment.replace(second=0, microsecond=0) + (timedelta(minutes=1) if moment.second >= 30 else timedelta())
    return rounded.isoformat()


@dataclass(frozen=True)
class SimulatedRun:
    """What a simulated run of the fleet says about the time left (`planning.views.simulate.Simulation`)."""

    now: str
    # Seconds until the wave ends, and until the windows out at `now` answer.
    seconds: float
    running_seconds: float
    batches: int
    # The shape of every window still to run (those out at `now` included).
    shapes: list[WindowShape]
    timings: Timings


def simulated_eta(run: SimulatedRun, defaults: Defaults = DEFAULTS) -> Eta:
    """The `Eta` of a simulated run (an empty one when no window is left)."""
    kinds = {s.kind for s in run.shapes}
    if not run.shapes:
        return Eta(source=source_text(run.timings, kinds, defaults), computed_at=run.now)
    per_kind = {k: round(window_seconds(next(s for s in run.shapes if s.kind == k), run.timings, defaults), 1)
                for k in sorted(kinds)}
    return Eta(
        finish_at=_minute(datetime.fromisoformat(run.now) + timedelta(seconds=run.seconds)),
        seconds_left=round(run.seconds, 1), batches_left=run.batches, windows_left=len(run.shapes),
        window_seconds=per_kind, gap_seconds=round(gap_seconds(run.timings, defaults), 1),
        source=source_text(run.timings, kinds, defaults), computed_at=run.now,
        running_seconds=round(run.running_seconds, 1))


def eta_at(eta: Eta, now: str) -> Eta:
    """`eta` as of `now` (module docstring): the time since it was computed passes, and windows that were
    out then and are still running past their assumed end push the end back by as much."""
    if not eta.finish_at or not eta.computed_at or not now:
        return eta
    elapsed = (datetime.fromisoformat(now) - datetime.fromisoformat(eta.computed_at)).total_seconds()
    if elapsed <= 0:
        return eta
    late = max(0.0, elapsed - eta.running_seconds) if eta.running_seconds else 0.0
    left = max(eta.seconds_left + late - elapsed, 0.0)
    finish = datetime.fromisoformat(now) + timedelta(seconds=left)
    return replace(eta, finish_at=_minute(finish), seconds_left=round(left, 1), computed_at=now,
                   running_seconds=max(eta.running_seconds - elapsed, 0.0))


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
