"""The budget at hand-out: a window starts only if its budget still holds on the nodes as they are then.
Pure (a machine step over a `FleetRun`, and the rules it applies).

A batch is planned on the fleet's latest listing; with drain-ahead its windows start seconds later, and
a rolling fleet tops up between listings. Nodes may meanwhile have been cordoned by someone else or turned
NotReady. So for a policy with capacity floors or topology limits, right before windows are handed out
(`send_checked`) the machine reads the nodes again (`ReadSupply`, the activity `read_node_supply`), takes
what it read into its view of the nodes (`take_supply`), and admits the nodes to send one by one against
the floors and topology limits with the fleet's windows out (`admit`, `planning.rollout.disruption.Tally`, the same
rules the planner used). A node that no longer fits is not handed out: it leaves the batch (first in line
for the next one, which the planner picks on the view just read), keeps its drain-ahead mark while it waits
(`FleetState.held`), and the fleet says why (`BatchPlannerState.waits`, the fleet's message).

Every hand-out reads (a read even seconds old missed a cordon in the tests: windows end within seconds of
each other). A read that fails holds every node of the hand-out (nothing starts on a view that cannot be
checked) until the next attempt. When the bridge reports an availability change (`AvailabilityChanged`: a
node of the fleet cordoned or uncordoned by someone else, or NotReady or Ready again), a fleet about to plan
its next batch or top-up reads the nodes first (`refresh_supply`), so a floor that frees up (or fills) is
seen within seconds, not at the next listing. Runs recorded before the rule (patch `budget-at-hand-out`)
hand out as they did.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import timedelta

from api.enums import CanaryPhase
from api.policy import DeploymentPolicySpec
from planning.fleet.acts import send, wait
from planning.fleet.commands import Failed, ReadSupply
from planning.fleet.run import RESPECT_PATCH, FleetRun, Steps
from planning.rollout import batches, disruption
from planning.rollout import fleet_state as fs
from protocol.activities import NodeAvailability, ReadNodeSupplyInput, ReadNodeSupplyResult

BUDGET_AT_HAND_OUT_PATCH = "budget-at-hand-out"
# After a hand-out where no node fitted: how long before the fleet plans again (unless a message comes).
HOLD_PAUSE = timedelta(seconds=10)


def checks_budget(run: FleetRun) -> Steps[bool]:
    """The fleet's hand-outs read the nodes first: its policy has floors or topology limits, or (runs with the
    rule) other people's cordons and maintenance count against its count budgets, whatever its policy."""
    if disruption.limits_of(run.policy):
        return True
    return (yield from run.patched(RESPECT_PATCH))


def take_supply(state: fs.FleetState, nodes: Mapping[str, NodeAvailability]) -> None:
    """The fleet's view of its nodes with a fresh read's availability (nodes not read are left as they were).
    The nodes whose view changed are told to the state's derived views (a node held by other maintenance
    says so in `progress`: `planning.views.fleet_nodes`)."""
    changed = []
    for name, seen in nodes.items():
        listed = state.targets.get(name)
        if listed is None:
            continue
        labels = {**listed.labels, **seen.labels}
        taken = replace(listed, down=seen.down, capacity=dict(seen.capacity), labels=labels)
        if taken != listed:
            state.targets[name] = taken
            changed.append(name)
    fs.touch_nodes(state, changed)


def admit(state: fs.FleetState, policy: DeploymentPolicySpec, nodes: Collection[str],
          others: disruption.Others | None = None) -> tuple[list[str], list[disruption.Wait]]:
    """Of `nodes` (in order), those that may enter a window now with the fleet's windows out, and why the
    others may not (the planner's rules: `planning.rollout.batches.Admission`; with `others`, the count
    budgets with the nodes down for others' reasons, and other maintenance)."""
    admission = batches.Admission(fs.supply(state, policy), others)
    planner = state.planner
    comps = planner.compartments if planner is not None and others is not None else {}

    def compartment(node: str) -> batches.CompartmentState | None:
        name = planner.compartment_of(node) if planner is not None else None
        return comps.get(name) if name is not None else None

    for node in sorted(state.in_flight):
        admission.count(node, compartment(node))
    fits = [n for n in nodes if admission.admit(n, compartment(n))]
    return fits, admission.waits


def hold(state: fs.FleetState, waits: Collection[disruption.Wait]) -> None:
    """Nodes that may not start now leave the batch (or the rolling window set) and wait, marked, saying why."""
    planner = state.planner
    held = {w.node: w.text for w in waits}
    state.held.update(held)
    if planner is None or not held:
        return
    had_batch = bool(planner.current)
    for name in list(planner.current):
        kept = [n for n in planner.current[name] if n not in held]
        if kept:
            planner.current[name] = kept
        else:
            del planner.current[name]
    if planner.canary_phase is CanaryPhase.RUNNING:
        planner.canary_nodes = [n for n in planner.canary_nodes if n not in held]
        if not planner.canary_nodes:
            planner.canary_phase = CanaryPhase.NONE  # no canary node could start: it is picked again
    if had_batch and not planner.current:
        planner.batch_number -= 1  # the batch never went out
    planner.waits = disruption.notes(waits)


def read_supply(run: FleetRun, candidates: Collection[str] = ()) -> Steps[str]:
    """Read the fleet's nodes again and take what was read; "" or why the read failed. Only what may have
    changed is read (issue 45): every node cordoned or in a window (the apiserver selects them), the `candidates`
    to hand out, the nodes the bridge reported changed, and those the fleet's view has down and not in its own
    window (to see them up again: a node that was in a window may be NotReady now, which no selection finds)."""
    state = run.state
    asked = {*candidates, *run.availability_changed}
    asked.update(n for n, t in state.targets.items() if t.down and n not in state.in_flight)
    result: ReadNodeSupplyResult | Failed = yield ReadSupply(ReadNodeSupplyInput(
        nodes=sorted(asked & state.targets.keys()), label_keys=disruption.topology_keys(run.policy),
        resources=disruption.floor_resources(run.policy), respect=run.respect_json(), down_only=True))
    if isinstance(result, Failed):
        yield from run.log(f"reading the nodes before a hand-out failed: {result.reason}", warning=True)
        return result.reason
    run.availability_changed.clear()
    take_supply(state, result.nodes)
    return ""


def refresh_supply(run: FleetRun) -> Steps[None]:
    """Before planning a batch or a top-up: read the nodes when the bridge reported a change of their
    availability since the last read (only for a policy whose budgets read them, in runs with the rule)."""
    if not run.availability_changed or not (yield from checks_budget(run)):
        return
    if (yield from run.patched(BUDGET_AT_HAND_OUT_PATCH)):
        yield from read_supply(run, run.availability_changed)
    else:
        run.availability_changed.clear()


def send_checked(run: FleetRun, nodes: list[str]) -> Steps[None]:
    """Hand `nodes` their windows, each only if its budget holds on a fresh read (module docstring)."""
    if not nodes or not (yield from checks_budget(run)) or not (yield from run.patched(BUDGET_AT_HAND_OUT_PATCH)):
        yield from send(run, nodes)
        return
    problem = yield from read_supply(run, nodes)
    if problem:
        waits = [disruption.Wait(n, disruption.RULE_UNREAD, state_compartment(run, n), f"the nodes could not be read: {problem}")
                 for n in nodes]
        hold(run.state, waits)
        run.state.message = f"holding {len(nodes)} node(s): the nodes could not be read before their windows"
        yield from wait(run, HOLD_PAUSE)
        return
    fits, waits = admit(run.state, run.policy, nodes, (yield from run.others()))
    if waits:
        hold(run.state, waits)
        run.state.message = (f"{len(waits)} node(s) no longer fit at hand-out and wait: "
                             f"{disruption.describe(disruption.notes(waits))}")
        yield from run.log(run.state.message)
    if not fits:
        # Nothing starts: the next plan is made on what was just read, after a pause (or a message), not in a loop.
        yield from wait(run, HOLD_PAUSE)
        return
    yield from send(run, fits)


def state_compartment(run: FleetRun, node: str) -> str:
    """The compartment the planner put `node` in (the default one when it is unknown)."""
    planner = run.state.planner
    found = planner.compartment_of(node) if planner is not None else None
    return found or batches.DEFAULT_COMPARTMENT
