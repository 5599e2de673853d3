"""What a rollout remembers about its nodes, and its progress report. Deterministic, no I/O.

`RolloutCarry` (workflows/messages.py) is the rollout's whole memory as plain data, carried through
continue-as-new. `NodeBook` wraps it with the bookkeeping the
workflow needs: per-node outcome, requests in flight, blocked nodes, and the counts for `progress`.

With `strict` (rollouts started after the patch `workflows.rollout.PATCH_WINDOWS_IN_FLIGHT`), a
node whose request is in flight is never finished: a batch is evaluated, and the rollout is done,
only when every window it handed over has answered; nodes in flight are never handed another
request (`startable`). Without it the book keeps its earlier rules, so recorded histories replay.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import TypeAdapter

    from api.enums import RolloutPhase, State
    from planning.status import RolloutProgress
    from workflows.messages import NodeResult, RolloutCarry

# Outcomes that take a node out of the remaining set.
TERMINAL = frozenset({State.COMPLETE.value, State.ERRORING.value, State.BLOCKED.value, State.SKIPPED.value})

# Built when this module is first imported, by the worker outside the workflow sandbox, where
# planning's (string) annotations resolve; the sandbox then reuses it (the module is passed through).
_CARRY_ADAPTER = TypeAdapter(RolloutCarry)


def carry_to_json(carry: RolloutCarry) -> dict[str, Any]:
    """`carry` as JSON-able data (for continue-as-new)."""
    return _CARRY_ADAPTER.dump_python(carry, mode="json")


def carry_from_json(data: dict[str, Any]) -> RolloutCarry:
    """The `RolloutCarry` stored by `carry_to_json`."""
    return _CARRY_ADAPTER.validate_python(data)


class NodeBook:
    """Bookkeeping over a `RolloutCarry` (the workflow owns both)."""

    def __init__(self, package: str, carry: RolloutCarry, strict: bool = False) -> None:
        self.package = package
        self.carry = carry
        self.strict = strict

    def request_id(self, node: str) -> str:
        """A new request id for `node`, unique within the rollout (package, epoch, sequence)."""
        self.carry.sequence += 1
        return f"{self.package}:{self.carry.epoch}:{node}:{self.carry.sequence}"

    def is_current(self, result: NodeResult) -> bool:
        """Whether a result answers a request of the current epoch or one still in flight (others are stale)."""
        if self.strict and self.carry.in_flight.get(result.node) == result.request_id:
            return True
        return result.request_id.startswith(f"{self.package}:{self.carry.epoch}:")

    def record(self, result: NodeResult) -> None:
        """Store a node's result and take it out of the requests in flight."""
        self.carry.in_flight.pop(result.node, None)
        self.carry.outcomes[result.node] = result.state
        self.carry.messages[result.node] = result.message
        if result.state == State.COMPLETE.value:
            # A node relabelled away while its window ran was still updated: it did not depart untouched.
            self.carry.departed.pop(result.node, None)

    def hold(self, result: NodeResult) -> None:
        """A node its node workflow holds (unreadable state): blocked as a listing would find it.

        It leaves the eligible nodes, so the next listing decides: still unreadable, it stays
        blocked; readable again, it comes back as a target and is requested again.
        """
        carry = self.carry
        carry.in_flight.pop(result.node, None)
        carry.outcomes.pop(result.node, None)
        carry.messages.pop(result.node, None)
        if result.node in carry.eligible:
            carry.eligible.remove(result.node)
        carry.blocked[result.node] = result.message

    def remaining(self) -> set[str]:
        """Eligible nodes that still need the package (no terminal outcome)."""
        return {n for n in self.carry.eligible if self.carry.outcomes.get(n) not in TERMINAL}

    def startable(self) -> set[str]:
        """Remaining nodes that may get a request now: none is in flight already."""
        remaining = self.remaining()
        return remaining - set(self.carry.in_flight) if self.strict else remaining

    def batch_results(self, batch: list[str]) -> tuple[list[str], list[str]] | None:
        """(succeeded, failed) once every node of `batch` has an outcome (strict: none in flight), else None."""
        if self.strict and any(n in self.carry.in_flight for n in batch):
            return None
        if any(n not in self.carry.outcomes and n in self.carry.eligible for n in batch):
            return None
        ok = [n for n in batch if self.carry.outcomes.get(n) == State.COMPLETE.value]
        bad = [n for n in batch if self.carry.outcomes.get(n) == State.ERRORING.value]
        return ok, bad

    def failed_nodes(self) -> list[str]:
        """Nodes whose latest result is erroring."""
        return sorted(n for n, s in self.carry.outcomes.items() if s == State.ERRORING.value)

    def progress(self, phase: RolloutPhase, version: str) -> RolloutProgress:
        """The `progress` query's answer for the current state."""
        carry, counts = self.carry, {s.value: 0 for s in State}
        for node in carry.eligible:
            if node in carry.outcomes:
                counts[carry.outcomes[node]] = counts.get(carry.outcomes[node], 0) + 1
            elif node in carry.in_flight:
                counts[State.IN_PROGRESS.value] += 1
            else:
                counts[State.WAITING.value] += 1
        counts[State.BLOCKED.value] += len(carry.blocked) + len(carry.waiting)
        blocked = carry.blocked | carry.waiting
        erroring = {}
        for node, state in carry.outcomes.items():
            if state == State.BLOCKED.value:
                blocked[node] = carry.messages.get(node, "")
            elif state == State.ERRORING.value:
                erroring[node] = carry.messages.get(node, "")
        planner = carry.planner
        return RolloutProgress(
            phase=phase,
            version=version,
            total_nodes=len(carry.eligible) + len(carry.blocked) + len(carry.waiting),
            counts={k: v for k, v in counts.items() if v},
            batch_number=planner.batch_number if planner else 0,
            batch_size=len(planner.current_batch) if planner else 0,
            canary_phase=planner.canary_phase if planner else RolloutProgress().canary_phase,
            canary_nodes=list(planner.canary_nodes) if planner else [],
            blocked=blocked,
            erroring=erroring,
            message=self._message(),
        )

    def _message(self) -> str:
        message = self.carry.message
        if self.carry.departed:
            names = sorted(self.carry.departed)
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            note = f"{len(names)} node(s) no longer targeted (left the selector, ignored or deleted), not updated: {shown}"
            message = f"{message}; {note}" if message else note
        return message
