"""Analysis gates of a fleet: samples, their outcome, and when a gate passes or fails. Pure.

The gates are the DeploymentPolicy's `spec.analysis` (`api/analysis.py` describes the fields). A
fleet keeps one `GateBook` (part of `planning.rollout.fleet_state.FleetState`, so it survives
continue-as-new) and its workflow asks, in turn:

* evaluation points: after the canary (once its soak is over) the fleet opens the point
  `afterCanary` (gates with `when: afterCanary` or `betweenBatches`); after every other batch, when
  work is left, the point `betweenBatches`. `point_due` names the gates to sample now (the first
  sample at once, then every `intervalSeconds`), `record_point` takes each sample: `count`
  successes in a row pass a gate, more than `failureLimit` failed samples fail it, and the next
  batch waits until every gate of the point passed;
* continuous gates: `continuous_due` names those to sample (while windows are out, every
  `intervalSeconds`, and before a batch is handed out when the latest sample is older than that);
  `record_continuous` fails one after more than `failureLimit` failed samples in a row;
  `continuous_clear` says whether a batch may start (every continuous gate's latest sample, taken
  within its interval, succeeded);
* a query that could not be evaluated (Prometheus unreachable after the activity's retries, a
  query Prometheus refuses, a result that is neither a vector nor a scalar) fails its gate at once,
  with the reason.

A failed gate is recorded as `book.failure` (gate, query, condition, value, time, reason) and
counted in `book.failures` (the bridge emits one Warning Event per new failure); the fleet then
halts. `override` is what `resume` does: the failed evaluation counts as passed once (the point is
over, continuous gates start counting again; their next failing sample may halt again). `restart`
is what `retry` does: the gates of the point are evaluated again from the start.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from api.analysis import AnalysisGate, Condition
from api.enums import GateWhen
from protocol.activities import PromSeries, QueryPrometheusResult

# Series shown in a sample's value text.
SHOWN_SERIES = 3


@dataclass(frozen=True)
class SampleOutcome:
    """A sample judged against a gate's condition: success, and the value as shown in the status."""

    ok: bool
    value: str
    error: str = ""


@dataclass
class GateTrack:
    """One gate's samples at the current point (or, for a continuous gate, in the current wave)."""

    samples: int = 0
    # Successful samples in a row.
    successes: int = 0
    # Failed samples: at a point, all of them; for a continuous gate, in a row.
    failures: int = 0
    passed: bool = False
    last_ok: bool = False
    last_value: str = ""
    # RFC 3339 times of the latest sample and of the next one due ("" = due now).
    last_at: str = ""
    next_at: str = ""


@dataclass
class GateFailure:
    """A gate that failed: what was asked, what came back, and when (shown in every status)."""

    gate: str
    query: str
    condition: str
    value: str
    at: str
    reason: str
    when: str
    # How many gate failures the fleet had, this one included (identifies it: one Event per failure).
    number: int = 0


@dataclass
class GateBook:
    """A fleet's gate bookkeeping (module rules)."""

    # GateWhen value of the evaluation point in progress ("" = none).
    point: str = ""
    tracks: dict[str, GateTrack] = field(default_factory=dict)
    continuous: dict[str, GateTrack] = field(default_factory=dict)
    failure: GateFailure | None = None
    failures: int = 0


def _series_text(series: PromSeries) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(series.labels.items()))
    return f"{{{labels}}} {series.value}" if labels else series.value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def judge(condition: Condition, result: QueryPrometheusResult | None, error: str = "") -> SampleOutcome:
    """The outcome of a query's `result` under `condition` (the language of `api/analysis.py`); `error`:
    why the query could not be evaluated (the activity failed), which fails the sample."""
    if result is None or error:
        return SampleOutcome(False, "", error or "no result")
    series = result.series
    if condition.wants_empty:
        if not series:
            return SampleOutcome(True, "no series")
        shown = "; ".join(_series_text(s) for s in series[:SHOWN_SERIES])
        more = f" and {len(series) - SHOWN_SERIES} more" if len(series) > SHOWN_SERIES else ""
        return SampleOutcome(False, f"{len(series)} series: {shown}{more}")
    if not series:
        return SampleOutcome(False, "no series")
    failing = [s for s in series if not condition.holds(_number(s.value))]
    if len(series) == 1:
        return SampleOutcome(not failing, _series_text(series[0]))
    if failing:
        return SampleOutcome(False, f"{_series_text(failing[0])} ({len(failing)} of {len(series)} series fail)")
    top = max(series, key=lambda s: _number(s.value))
    return SampleOutcome(True, f"{len(series)} series hold (highest {_series_text(top)})")


def applies(when: GateWhen, point: GateWhen) -> bool:
    """True when a gate evaluated `when` is evaluated at `point` (afterCanary also runs betweenBatches gates)."""
    return when is point or (point is GateWhen.AFTER_CANARY and when is GateWhen.BETWEEN_BATCHES)


def open_point(book: GateBook, gates: Sequence[AnalysisGate], point: GateWhen) -> bool:
    """Start evaluating the gates of `point`; False when no gate applies there (nothing to wait for)."""
    names = [g.name for g in gates if applies(g.when, point)]
    book.point = point.value if names else ""
    book.tracks = {name: GateTrack() for name in names}
    return bool(names)


def _due(track: GateTrack, now: datetime) -> bool:
    return not track.next_at or datetime.fromisoformat(track.next_at) <= now


def point_due(book: GateBook, gates: Sequence[AnalysisGate], now: datetime) -> list[AnalysisGate]:
    """Gates of the open point to sample now."""
    return [g for g in gates if g.name in book.tracks and not book.tracks[g.name].passed
            and _due(book.tracks[g.name], now)]


def point_passed(book: GateBook) -> bool:
    """True when no point is open or every gate of it passed (the next batch may start)."""
    return not book.point or all(t.passed for t in book.tracks.values())


def next_sample(tracks: dict[str, GateTrack]) -> datetime | None:
    """When the next sample of `tracks` (those not passed) is due."""
    times = [datetime.fromisoformat(t.next_at) for t in tracks.values() if not t.passed and t.next_at]
    return min(times) if times else None


def _take(track: GateTrack, gate: AnalysisGate, outcome: SampleOutcome, now: datetime) -> None:
    track.samples += 1
    track.last_ok, track.last_value, track.last_at = outcome.ok, outcome.value, now.isoformat()
    track.next_at = (now + timedelta(seconds=gate.interval_seconds)).isoformat()
    if outcome.ok:
        track.successes += 1
    else:
        track.successes = 0
        track.failures += 1


def _fail(book: GateBook, gate: AnalysisGate, outcome: SampleOutcome, now: datetime, reason: str) -> GateFailure:
    book.failures += 1
    book.failure = GateFailure(
        gate=gate.name, query=gate.query, condition=str(gate.condition), value=outcome.value,
        at=now.isoformat(), reason=reason, when=gate.when.value, number=book.failures,
    )
    return book.failure


def _verdict(book: GateBook, gate: AnalysisGate, track: GateTrack, outcome: SampleOutcome,
             now: datetime) -> GateFailure | None:
    if outcome.error:
        return _fail(book, gate, outcome, now, f"the query could not be evaluated: {outcome.error}")
    if track.failures > gate.failure_limit:
        in_a_row = " in a row" if gate.when is GateWhen.CONTINUOUS else ""
        return _fail(book, gate, outcome, now,
                     f"{track.failures} failed sample(s){in_a_row}, more than failureLimit {gate.failure_limit}")
    return None


def record_point(book: GateBook, gate: AnalysisGate, outcome: SampleOutcome, now: datetime) -> GateFailure | None:
    """Take one sample of a gate of the open point; the failure when the gate failed."""
    track = book.tracks[gate.name]
    _take(track, gate, outcome, now)
    failure = _verdict(book, gate, track, outcome, now)
    if failure is None and track.successes >= gate.needed:
        track.passed = True
    return failure


def continuous_gates(gates: Sequence[AnalysisGate]) -> list[AnalysisGate]:
    """The gates sampled while batches run."""
    return [g for g in gates if g.when is GateWhen.CONTINUOUS]


def continuous_due(book: GateBook, gates: Sequence[AnalysisGate], now: datetime) -> list[AnalysisGate]:
    """Continuous gates whose next sample is due (never sampled in this wave: at once)."""
    return [g for g in continuous_gates(gates) if g.name not in book.continuous or _due(book.continuous[g.name], now)]


def record_continuous(book: GateBook, gate: AnalysisGate, outcome: SampleOutcome,
                      now: datetime) -> GateFailure | None:
    """Take one sample of a continuous gate; the failure when it failed."""
    track = book.continuous.setdefault(gate.name, GateTrack())
    _take(track, gate, outcome, now)
    if outcome.ok:
        track.failures = 0  # failures count in a row here
    return _verdict(book, gate, track, outcome, now)


def continuous_clear(book: GateBook, gates: Sequence[AnalysisGate], now: datetime) -> bool:
    """True when a batch may start as far as continuous gates go (each latest sample fresh and good)."""
    for gate in continuous_gates(gates):
        track = book.continuous.get(gate.name)
        if track is None or _due(track, now) or not track.last_ok:
            return False
    return True


def start_wave(book: GateBook) -> None:
    """A new wave: no point open, continuous gates start counting again (a failure stays until resume)."""
    book.point, book.tracks, book.continuous = "", {}, {}


def override(book: GateBook) -> bool:
    """`resume`: a failed gate counts as passed once. True when there was a failure to override."""
    if book.failure is None:
        return False
    book.failure = None
    book.point, book.tracks = "", {}
    for track in book.continuous.values():
        # Counted as a good sample now: the next batch may start; the next failing sample counts anew.
        track.failures, track.last_ok = 0, True
    return True


def restart(book: GateBook) -> None:
    """`retry`: a failed gate is evaluated again from the start (the point's gates and continuous gates)."""
    if book.failure is None:
        return
    book.failure = None
    book.tracks = {name: GateTrack() for name in book.tracks}
    book.continuous = {}


def summary(book: GateBook, gates: Sequence[AnalysisGate]) -> str:
    """`gates after the canary: errors 1/3 (value 0.1), alerts passed` (for the fleet's message)."""
    parts = []
    for gate in gates:
        track = book.tracks.get(gate.name)
        if track is None:
            continue
        if track.passed:
            parts.append(f"{gate.name} passed")
        elif track.samples:
            parts.append(f"{gate.name} {track.successes}/{gate.needed} (value {track.last_value})")
        else:
            parts.append(f"{gate.name} not sampled yet")
    where = "after the canary" if book.point == GateWhen.AFTER_CANARY.value else "between batches"
    return f"gates {where}: " + ", ".join(parts)


def failure_text(failure: GateFailure) -> str:
    """One line naming the gate, its query, the value and the time, and why it failed."""
    value = failure.value or "no value"
    return (f"gate {failure.gate} failed at {failure.at}: {failure.query} = {value} "
            f"(success condition {failure.condition}; {failure.reason})")
