"""The ETA of a running fleet: its own machine run ahead from its state on a simulated clock. Pure.

`fleet_eta(run)` copies the fleet's state and runs the machine (`planning.views.simulate`) on the fleet's
own view of its nodes (`planning.views.worlds.FleetViewWorld`), every window succeeding: the windows out
end their measured (or default) time after their hand-over, the batches after them are the ones the
fleet would hand out, with its soak, drain-ahead's lead, its maintenance windows and gate samples.
The simulated end is the ETA (`planning.views.eta.simulated_eta`); `planning.views.eta.eta_at` moves it to the
moment it is read.
"""

from __future__ import annotations

import copy

from planning.fleet.run import FleetRun
from planning.views.eta import Eta, SimulatedRun, simulated_eta
from planning.views.simulate import simulate
from planning.views.worlds import FleetViewWorld


def fleet_eta(live: FleetRun) -> Eta | None:
    """When `live`'s wave ends, every window succeeding (None: no wave, halted, or nothing left)."""
    state = live.state
    planner = state.planner
    if planner is None or planner.halted or state.halted or state.spec is None:
        return None
    ahead = FleetRun(input=live.input, state=copy.deepcopy(state), policy=live.policy, phase=live.phase,
                     now=live.now, listed_at=live.listed_at, resolved=False)
    world = FleetViewWorld(state.targets, state.spec.packages, state.timings)
    sim = simulate(ahead, world, live.now)
    if sim.stopped != "done":
        return None
    batches = len({(h.batch, h.canary) for h in sim.handouts}) + (1 if state.in_flight else 0)
    return simulated_eta(SimulatedRun(now=live.stamp(), seconds=sim.end, running_seconds=sim.running_end,
                                      batches=batches, shapes=world.shapes_run, timings=state.timings))
