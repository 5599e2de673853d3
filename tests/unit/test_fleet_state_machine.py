"""Random sequences of spec changes, listings, requests, answers, operator signals and lost node
workflows against planning/rollout/fleet_state.py (a hypothesis state machine), with the docstring's rules as
invariants. Listings come from the real target selection over Nodes whose state annotation records
what the answers completed; requests are handed out as the fleet machine does (`planning.fleet.acts`).
"""

from __future__ import annotations

import copy
import functools
import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from api.enums import State
from api.package import PackageSpec
from planning.node.targets import NodeView
from planning.rollout import fleet_state as fs
from planning.rollout.fleet_targets import FleetPackage, FleetQuery, FleetSelection, select_fleet
from protocol.fleet import Filter, FleetSpec, PackageEntry
from tests.unit.fleet_builders import a_policy, a_result, a_spec, taint

FLEET = "fleet/gpu"
NODES = ["n0", "n1", "n2", "n3"]
PACKAGES = ["a", "b", "c"]
VERSIONS = ["1.0.0", "2.0.0"]
NOW = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
OUTCOMES = [State.COMPLETE.value, State.COMPLETE.value, State.ERRORING.value, State.BLOCKED.value,
            State.SKIPPED.value]
filters = st.builds(Filter, st.lists(st.sampled_from(PACKAGES), max_size=2, unique=True),
                    st.lists(st.sampled_from(NODES), max_size=2, unique=True))


@functools.cache
def validated(spec: str) -> PackageSpec:
    """The PackageSpec of a spec's JSON (cached: the machine lists the same few specs over and over)."""
    return PackageSpec.model_validate_json(spec)


class FleetMachine(RuleBasedStateMachine):
    """A fleet's state and a small world: four nodes, up to three Packages (`b` depends on `a`)."""

    def __init__(self) -> None:
        super().__init__()
        self.state = fs.FleetState()
        self.versions: dict[str, str] = {"a": "1.0.0", "b": "1.0.0"}
        self.paused: set[str] = set()
        self.budget = 2
        # What the nodes record complete (package -> version), their taints and a label that changes.
        self.recorded: dict[str, dict[str, str]] = {n: {} for n in NODES}
        self.tainted: set[str] = set()
        self.relabelled: dict[str, int] = dict.fromkeys(NODES, 0)
        # Request id -> Package -> version it carried; every id handed out.
        self.carried: dict[str, dict[str, str]] = {}
        # (wave, node, Package) asked and neither answered without an outcome nor cleared since.
        self.asked: set[tuple[int, str, str]] = set()
        fs.set_spec(self.state, self.spec())

    # --- the world -----------------------------------------------------------------------------

    def entry(self, name: str) -> PackageEntry:
        version = self.versions[name]
        fields: dict[str, Any] = {}
        if name == "b" and "a" in self.versions:
            fields["dependsOn"] = {"a": self.versions["a"]}
        return PackageEntry(name, a_spec(name, version, **fields), 1, paused=name in self.paused)

    def spec(self) -> FleetSpec:
        policy = {"default": {"budget": {"count": self.budget}}}
        return FleetSpec("gpu", policy, 1, [self.entry(n) for n in sorted(self.versions)])

    def listing(self) -> FleetSelection:
        packages = {e.name: FleetPackage(validated(json.dumps(e.spec, sort_keys=True)), paused=e.paused)
                    for e in self.spec().packages}
        nodes = []
        for node in NODES:
            state = {p: {"version": v, "state": "complete"} for p, v in self.recorded[node].items()}
            taints = [taint("dedicated")] if node in self.tainted else []
            labels = {"pool": "gpu", "rev": str(self.relabelled[node])}
            nodes.append(NodeView(node, labels, taints, json.dumps({"packages": state})))
        in_flight = {n: f.packages for n, f in self.state.in_flight.items()}
        return select_fleet(FleetQuery(packages, nodes, in_flight))

    def outcomes(self) -> set[tuple[str, str, str]]:
        return {(n, p, s) for n, r in self.state.records.items() for p, s in r.outcomes.items()}

    def forget_cleared(self, before: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        cleared = before - self.outcomes()
        self.asked -= {(self.state.wave, n, p) for n, p, _ in cleared}
        return cleared

    # --- desired state ---------------------------------------------------------------------------

    @rule(package=st.sampled_from(PACKAGES), version=st.sampled_from([*VERSIONS, None]), paused=st.booleans())
    def change_package(self, package: str, version: str | None, paused: bool) -> None:
        before = dict(self.state.revisions)
        was_wanted = self.state.wave_wanted
        if version is None:
            self.versions.pop(package, None)
        else:
            self.versions[package] = version
        (self.paused.add if paused else self.paused.discard)(package)
        spec = self.spec()
        revisions = {e.name: fs.package_revision(e) for e in spec.packages}
        changed = any(before.get(p) != r for p, r in revisions.items())
        assert fs.set_spec(self.state, spec) is (was_wanted or changed)
        if not self.state.wave_wanted:
            assert self.state.revisions == revisions  # removals (and pauses) alone: no wave

    @rule(budget=st.integers(1, 3))
    def change_policy(self, budget: int) -> None:
        changed = budget != self.budget
        was_wanted = self.state.wave_wanted
        self.budget = budget
        assert fs.set_spec(self.state, self.spec()) is (was_wanted or changed)

    @precondition(lambda self: self.state.wave_wanted and not self.state.in_flight)
    @rule()
    def start_wave(self) -> None:
        wave = self.state.wave
        fs.start_wave(self.state, self.listing(), a_policy(self.budget), FLEET)
        assert self.state.wave == wave + 1 and not self.state.records and not self.state.wave_wanted

    @precondition(lambda self: self.state.planner is not None)
    @rule()
    def refresh(self) -> None:
        before = self.outcomes()
        fingerprints = {n: r.fingerprint for n, r in self.state.records.items()}
        selection = self.listing()
        fs.refresh_targets(self.state, selection, a_policy(self.budget))
        for node, package, outcome in self.forget_cleared(before):
            # Only blocked outcomes go by themselves, and only when the node changed since (and, with
            # the fleet branch's later rule, a complete one whose work is pending there again).
            if outcome == State.COMPLETE.value:
                assert package in selection.nodes[node].pending
            else:
                assert outcome == State.BLOCKED.value
                assert selection.nodes[node].fingerprint != fingerprints[node]

    @rule(node=st.sampled_from(NODES), tainted=st.booleans())
    def node_changes(self, node: str, tainted: bool) -> None:
        (self.tainted.add if tainted else self.tainted.discard)(node)
        self.relabelled[node] += 1

    # --- requests and answers ----------------------------------------------------------------------

    @precondition(lambda self: self.state.planner is not None and not self.state.wave_wanted
                  and not self.state.halted and not self.state.paused and fs.startable(self.state))
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        nodes = data.draw(st.lists(st.sampled_from(sorted(fs.startable(self.state))), min_size=1, unique=True))
        entries = fs.entries(self.state)
        for node in nodes:
            packages = fs.wanted(self.state, node)
            for package in packages:
                key = (self.state.wave, node, package)
                assert key not in self.asked, f"{node} asked twice for {package} in wave {self.state.wave}"
                self.asked.add(key)
            request_id = fs.request_id(self.state, FLEET, node)
            assert request_id not in self.carried
            self.carried[request_id] = {p: str(entries[p].spec["version"]) for p in packages}
            self.state.in_flight[node] = fs.InFlight(request_id, packages, NOW)
            fs.touch_nodes(self.state, [node])  # what the fleet's own hand-out reports

    @precondition(lambda self: self.state.in_flight)
    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.state.in_flight)))
        flight = self.state.in_flight[node]
        withdrawn = data.draw(st.integers(0, 5)) == 0
        outcomes = {} if withdrawn else {p: data.draw(st.sampled_from(OUTCOMES)) for p in flight.packages}
        assert fs.record_result(self.state, a_result(node, flight.request_id, withdrawn, **outcomes))
        assert node not in self.state.in_flight
        for package in flight.packages:
            outcome = outcomes.get(package, State.SKIPPED.value)
            if outcome == State.COMPLETE.value:
                self.recorded[node][package] = self.carried[flight.request_id][package]
            if outcome == State.SKIPPED.value:
                self.asked.discard((self.state.wave, node, package))  # no outcome: it may be asked again

    @precondition(lambda self: self.carried)
    @rule(data=st.data())
    def stale_answer(self, data: st.DataObject) -> None:
        current = {f.request_id for f in self.state.in_flight.values()}
        stale = sorted(set(self.carried) - current) + ["never-sent"]
        request_id = data.draw(st.sampled_from(stale))
        node = request_id.rsplit(":", 1)[-1] if ":" in request_id else data.draw(st.sampled_from(NODES))
        before = copy.deepcopy(self.state)
        assert fs.record_result(self.state, a_result(node, request_id, a="complete")) is False
        assert self.state == before

    @precondition(lambda self: self.state.in_flight)
    @rule(data=st.data(), how=st.sampled_from(["Terminated", "TimedOut"]))
    def lost(self, data: st.DataObject, how: str) -> None:
        node = data.draw(st.sampled_from(sorted(self.state.in_flight)))
        flight = copy.deepcopy(self.state.in_flight[node])
        if fs.lost(self.state, node, how):
            assert flight.resent < fs.LOST_RESENDS
            # Sent again as `_resend` does: a new id, the same Packages (those still in the fleet).
            entries = fs.entries(self.state)
            request_id = fs.request_id(self.state, FLEET, node)
            packages = [p for p in flight.packages if p in entries]
            self.carried[request_id] = {p: self.carried[flight.request_id][p] for p in packages}
            self.state.in_flight[node] = fs.InFlight(request_id, packages, NOW, flight.resent + 1)
            fs.touch_nodes(self.state, [node])  # what the fleet's own hand-out reports
            return
        assert flight.resent == fs.LOST_RESENDS and node not in self.state.in_flight
        record = self.state.records[node]
        assert all(record.outcomes[p] == State.ERRORING.value and how in record.messages[p] for p in flight.packages)

    # --- operator signals ----------------------------------------------------------------------------

    @rule(scope=filters)
    def pause(self, scope: Filter) -> None:
        fs.apply_pause(self.state, scope)
        assert set(scope.packages) <= set(self.state.paused_packages) and self.state.paused == scope.is_empty() or \
            self.state.paused

    @rule(scope=filters)
    def resume(self, scope: Filter) -> None:
        fs.apply_resume(self.state, scope)
        assert not set(scope.packages) & set(self.state.paused_packages)
        assert not set(scope.nodes) & set(self.state.paused_nodes)
        if scope.is_empty():
            assert not (self.state.paused or self.state.halted or self.state.paused_packages)

    @rule(scope=filters)
    def halt(self, scope: Filter) -> None:
        withdraw = fs.apply_halt(self.state, scope)
        assert set(withdraw) <= set(self.state.in_flight)
        for node in withdraw:
            flight = self.state.in_flight[node]
            assert scope.is_empty() or node in scope.nodes or set(flight.packages) & set(scope.packages)

    @rule(scope=filters)
    def retry(self, scope: Filter) -> None:
        before = self.outcomes()
        fs.apply_retry(self.state, scope)
        cleared = self.forget_cleared(before)

        def matches(node: str, package: str, outcome: str) -> bool:
            return (outcome in (State.ERRORING.value, State.BLOCKED.value)
                    and (not scope.nodes or node in scope.nodes) and (not scope.packages or package in scope.packages))

        assert cleared == {o for o in before if matches(*o)}
        assert not self.state.halted

    # --- invariants ------------------------------------------------------------------------------------

    @invariant()
    def requests_and_wants_are_consistent(self) -> None:
        state = self.state
        startable = fs.startable(state)
        assert not startable & set(state.in_flight), "a node in flight is startable"
        assert startable <= set(state.targets)
        assert fs.remaining(state) == startable | set(state.in_flight)
        assert all(f.resent <= fs.LOST_RESENDS for f in state.in_flight.values())
        entries = fs.entries(state)
        for node, found in state.targets.items():
            wanted = fs.wanted(state, node)
            record = state.records.get(node)
            assert set(wanted) <= set(found.pending) & set(state.revisions)
            if not state.wave_wanted:
                # (While a wave is wanted nothing is sent: a Package just removed may still show here.)
                assert set(wanted) <= set(entries)
            assert not set(wanted) & set(state.paused_packages)
            assert not record or not set(wanted) & set(record.outcomes)
            if node in state.paused_nodes or node in state.departed:
                assert wanted == []
            for package in [p for p in wanted if p in entries]:
                # A window carries a dependent only with the dependency pending on that node (or done).
                for dep in entries[package].spec.get("dependsOn", {}):
                    if dep in found.pending:
                        done = record is not None and record.outcomes.get(dep) == State.COMPLETE.value
                        assert dep in wanted or done, f"{node}: {package} wanted without {dep}"

    @invariant()
    def batch_results_wait_for_every_batch_node(self) -> None:
        for batch in [[n] for n in NODES] + [NODES]:
            out = fs.batch_results(self.state, batch)
            assert (out is None) is any(n in self.state.in_flight for n in batch)
            if out is not None:
                succeeded, failed = out
                assert not set(succeeded) & set(failed)
                assert set(failed) == {n for n in batch if fs.node_failed(self.state, n)}


FleetMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestFleetMachine = FleetMachine.TestCase
