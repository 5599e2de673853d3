"""What a rollout remembers, the messages its inbox holds, and its progress report. Deterministic, no I/O.

`RolloutCarry` (workflows/messages.py) is the rollout's whole memory as plain data, carried through
continue-as-new. `NodeBook` wraps it with the bookkeeping the
workflow needs: per-node outcome, requests in flight, blocked nodes, and the counts for `progress`.
`RolloutState` is everything one run of `workflows.rollout.RolloutWorkflow` holds (the carry, its
book, the current spec and policy, the loop's flags, the `Rules` its patches decided) in one place.
`Message` is what the signal handlers queue: one small dataclass per kind of signal, applied by
the loop with `match` on the type (`RolloutWorkflow._apply_inbox`).

With `strict` (rollouts started after the patch `workflows.rollout.PATCH_WINDOWS_IN_FLIGHT`), a
node whose request is in flight is never finished: a batch is evaluated, and the rollout is done,
only when every window it handed over has answered; nodes in flight are never handed another
request (`startable`). Without it the book keeps its earlier rules, so recorded histories replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import TypeAdapter, ValidationError

    from api.enums import RolloutPhase, State
    from api.package import PackageSpec
    from api.policy import DeploymentPolicySpec
    from planning import batches
    from planning.compartments import DEFAULT_POLICY
    from planning.status import RolloutProgress
    from workflows.messages import NodeResult, RetryRequest, RolloutCarry, RolloutInput, SpecChange

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


# --- inbox: one type per signal (handlers only queue; the loop applies them in order) ------------


@dataclass(frozen=True)
class Pause:
    """`pause`: no new batch starts."""


@dataclass(frozen=True)
class Resume:
    """`resume`: clear pause and halt, promote a canary waiting for manual promotion."""


@dataclass(frozen=True)
class Halt:
    """`halt`: withdraw requests not yet started, hold until `resume` or `retry`."""


@dataclass(frozen=True)
class Retry:
    """`retry`: failed nodes (all, or `request.nodes`) get another window."""

    request: RetryRequest


@dataclass(frozen=True)
class SpecChanged:
    """`spec_changed`: the Package or its policy changed (re-plan)."""

    change: SpecChange


@dataclass(frozen=True)
class NodesChanged:
    """`nodes_changed`: re-list the nodes (rate-limited)."""


@dataclass(frozen=True)
class Deleted:
    """`deleted`: the Package is gone (uninstall when enabled, then end)."""


@dataclass(frozen=True)
class Answer:
    """`node_result`: a node workflow's answer to one of our requests."""

    result: NodeResult


Message = Pause | Resume | Halt | Retry | SpecChanged | NodesChanged | Deleted | Answer


# --- the run's state ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """What the rollout's patches decided for this run (True for runs started by the current code).

    `strict`: `PATCH_WINDOWS_IN_FLIGHT` (windows in flight stay targets, targets re-resolved per batch,
    dependencies checked); `marks`: `PATCH_MARK_BLOCKED` (unreadable states held, blocked nodes marked).
    Runs recorded before a patch replay with its earlier rules (both False before `run` decides).
    """

    strict: bool = False
    marks: bool = False


NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass
class RolloutState:
    """Everything one run of the rollout holds; `carry` is the part that crosses continue-as-new."""

    package: str = ""
    carry: RolloutCarry = field(default_factory=RolloutCarry)
    rules: Rules = Rules()
    phase: RolloutPhase = RolloutPhase.PENDING
    # The version `progress` reports: changes only with a new plan.
    version: str = ""
    # None while the latest spec is invalid (the rollout waits for the next change).
    spec: PackageSpec | None = None
    spec_json: dict[str, Any] = field(default_factory=dict)
    policy: DeploymentPolicySpec = DEFAULT_POLICY
    policy_name: str | None = None
    generation: int = 0
    # A new plan is due (start, spec change, uninstall).
    replan: bool = False
    # A re-list is due (`nodes_changed`, periodic); `relist_requested`: a `nodes_changed` is queued or
    # not yet listed (repeats do not queue another).
    relist: bool = False
    relist_requested: bool = False
    listed_at: datetime = NEVER
    # Targets were re-resolved since the last batch was handed over (strict rollouts list before each batch).
    resolved: bool = False
    # The spec change being applied left the package spec as it was (only generation or policy changed).
    keep_in_flight: bool = False
    book: NodeBook = field(init=False)

    def __post_init__(self) -> None:
        self.book = NodeBook(self.package, self.carry, self.rules.strict)

    def start(self, package: str, carry: RolloutCarry, rules: Rules) -> None:
        """The run's package, memory and rules (`run`, before the first message is applied)."""
        self.package, self.carry, self.rules = package, carry, rules
        self.book = NodeBook(package, carry, rules.strict)

    def take_spec(self, change: SpecChange) -> None:
        """The Package's (or its policy's) new spec; an invalid one leaves `spec` None until the next change."""
        self.generation = change.generation
        try:
            self.spec = PackageSpec.model_validate(change.spec)
            self.policy = DeploymentPolicySpec.model_validate(change.policy) if change.policy else DEFAULT_POLICY
        except ValidationError as err:
            # The bridge validates first; a spec that still fails here waits for the next change.
            workflow.logger.warning("invalid spec for %s: %s", self.package, err)
            self.spec = None
            self.carry.message = f"invalid spec: {err}"
            return
        self.spec_json = self.spec.dump()
        self.policy_name = change.policy_name
        if not self.version:
            self.version = self.spec.version

    def retry(self, request: RetryRequest) -> None:
        """Failed nodes (all, or `request.nodes`) re-enter the batches; their node workflows get `retry`."""
        carry = self.carry
        failed = self.book.failed_nodes()
        nodes = [n for n in failed if not request.nodes or n in request.nodes]
        for node in nodes:
            carry.outcomes.pop(node, None)
            carry.messages.pop(node, None)
            if node not in carry.retry_nodes:
                carry.retry_nodes.append(node)
        carry.halted = False
        if carry.planner is not None and carry.planner.halted:
            batches.resume_after_halt(carry.planner)

    def carry_over(self, input: RolloutInput) -> RolloutInput:
        """The next run's input (continue-as-new): the latest spec and policy, and the carry."""
        return RolloutInput(
            package=input.package,
            spec=self.spec_json or input.spec,
            generation=self.generation,
            policy_name=self.policy_name,
            policy=self.policy.dump() if self.policy is not DEFAULT_POLICY else None,
            paused=self.carry.paused,
            node_task_queue=input.node_task_queue,
            relist_seconds=input.relist_seconds,
            history_limit=input.history_limit,
            carry=carry_to_json(self.carry),
        )
