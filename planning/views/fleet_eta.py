"""The ETA of a running fleet: its own machine run ahead from its state on a simulated clock. Pure.

`fleet_eta(run)` copies the fleet's state and runs the machine (`planning.views.simulate`) on the fleet's
own view of its nodes (`planning.views.worlds.FleetViewWorld`), every window succeeding: the windows out
end their measured (or default) time after their hand-over, the batches after them are the ones the
fleet would hand out, with its soak, drain-ahead's lead, its maintenance windows and gate samples.
The simulated end is the ETA (`planning.views.eta.simulated_eta`); `planning.views.eta.eta_at` moves it to the
moment it is read.

At scale (issue 45) the run ahead is bounded: it lists no node (its world is the fleet's view, which a
listing would not change), shows no details line, and simulates at most `HORIZON` windows or, on a fleet of
N nodes, `HANDOUT_WORK` / N hand-outs (a hand-out weighs every node against the floors and topology limits),
but never fewer than the batches left in an exponential or linear ramp plus `PAST_RAMP` (extrapolated from
the ramp's small batches, a 10,000-node wave's ETA after its first batch was 3.9 times its time left);
the windows left after them are assumed to go at the rate the simulation's second half went (its answers over
that time: past an exponential ramp every batch has the budget's size, a rolling fleet keeps its budget's
windows; with too few answers, the windows out at once over a window's time), and each further batch to have
the size of the last one simulated. `EtaKeeper` computes it again only when the fleet's
batch (or phase, or halt) changed or `REFRESH` seconds of the fleet's time passed: the fleet's `progress` is
asked every few seconds, and in between the readers move the last ETA to their own clock (`eta_at`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from planning.fleet.run import FleetRun
from planning.rollout.batches import batches_to_budget
from planning.rollout.fleet_state import copy_for_simulation, remaining
from planning.views.eta import Eta, SimulatedRun, simulated_eta
from planning.views.simulate import WINDOWS_LIMIT, SimulationLimits, simulate
from planning.views.worlds import FleetViewWorld

# Windows the ETA simulates ahead at most, and the hand-outs (times the fleet's nodes): beyond, it extrapolates.
HORIZON = 400
HANDOUT_WORK = 30_000
# Hand-outs simulated past the ramp (its batches grown to the budget), and the longest ramp simulated.
PAST_RAMP = 2
RAMP_MOST = 12
# The run ahead lists no node: its last listing is as if ten years ahead, its periodic re-list as far.
NOT_LISTED = timedelta(days=3650)
NO_RELIST_SECONDS = int(NOT_LISTED.total_seconds())
# Seconds of the fleet's time after which the ETA is computed again even when its batch did not change.
REFRESH = timedelta(seconds=60)


def fleet_eta(live: FleetRun, horizon: int = HORIZON) -> Eta | None:
    """When `live`'s wave ends, every window succeeding (None: no wave, halted, or nothing left)."""
    state = live.state
    planner = state.planner
    if planner is None or planner.halted or state.halted or state.spec is None:
        return None
    ahead = FleetRun(input=replace(live.input, relist_seconds=NO_RELIST_SECONDS), state=copy_for_simulation(state),
                     policy=live.policy, phase=live.phase, now=live.now, listed_at=live.now + NOT_LISTED, resolved=False,
                     patches=dict(live.patches), show_details=False)
    world = FleetViewWorld(state.targets, state.spec.packages, state.timings)
    ramp = max((batches_to_budget(c, RAMP_MOST) for c in planner.compartments.values()), default=0)
    limits = SimulationLimits(windows=horizon,
                              handouts=max(3, HANDOUT_WORK // max(1, len(state.targets)), ramp + PAST_RAMP))
    sim = simulate(ahead, world, live.now, ahead.input, limits=limits)
    extra_seconds, extra_windows, extra_batches = 0.0, 0, 0
    if sim.stopped == WINDOWS_LIMIT:
        extra_windows = len(remaining(ahead.state))
        window = world.seconds_of(ahead.state) or 1.0
        extra_seconds = extra_windows / _rate(sim.answered, sim.peak / window)
        last = ahead.state.planner.current_batch if ahead.state.planner else []
        extra_batches = math.ceil(extra_windows / max(1, len(last) or sim.peak))
    elif sim.stopped != "done":
        return None
    batches = len({(h.batch, h.canary) for h in sim.handouts}) + (1 if state.in_flight else 0) + extra_batches
    shapes = world.shapes_run + [world.shapes_run[-1]] * extra_windows if world.shapes_run else []
    return simulated_eta(SimulatedRun(now=live.stamp(), seconds=sim.end + extra_seconds,
                                      running_seconds=sim.running_end, batches=batches, shapes=shapes,
                                      timings=state.timings))


def _rate(answered: list[float], at_once: float) -> float:
    """Windows per second over the second half of the simulated answers: those after its first answer's moment
    (a batch's windows answer together: the batch that ends then belongs to the first half) to the last; with
    fewer than two moments of answers, `at_once` (the windows out at once over a window's time)."""
    start = answered[len(answered) // 2] if answered else 0.0
    later = [t for t in answered if t > start]
    span = (later[-1] - start) if later else 0.0
    return len(later) / span if span > 0 else max(at_once, 1e-6)


@dataclass
class EtaKeeper:
    """The fleet's last ETA, computed again when due (module docstring)."""

    key: tuple[Any, ...] = ()
    at: datetime | None = None
    eta: Eta | None = None

    def get(self, run: FleetRun) -> Eta | None:
        """The ETA of `run` now: the last one, or a new one when its batch changed or it is REFRESH old."""
        state = run.state
        planner = state.planner
        key = (state.wave, planner.batch_number if planner else 0, planner.canary_phase if planner else None,
               run.phase, state.halted, bool(state.in_flight))
        if self.at is None or key != self.key or run.now - self.at >= REFRESH:
            self.key, self.at, self.eta = key, run.now, fleet_eta(run)
        return replace(self.eta) if self.eta is not None else None
