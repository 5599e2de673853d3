"""Which nodes of a fleet want a window now, kept up to date as the fleet's state changes. Pure.

The fleet asks at nearly every step of its loop which nodes may get a request now (`startable`: work wanted,
none in flight) and which still have work in the wave (`remaining`). Computed afresh, that reads every node
of the fleet (its targets, its record, the pauses, reruns and dependencies: `fleet_state.wanted`), several
times per window: at 10,000 nodes most of the fleet's own CPU per window (issue 45, docs/benchmarks.md).

`WorkIndex` keeps, for one `FleetState`, the set of startable nodes (built when first asked), and is told
what changed by the rules that change the state
(`planning.rollout.fleet_state`): `touch(state, nodes)` after a change that concerns only these nodes (an
answer, a hand-out, a lost request), `touch_all(state)` after one that may concern any node (a listing, a
new wave or desired state, an operator signal, a rerun). The index is derived data: it is not part of the
state's fields (not carried through continue-as-new, rebuilt when first asked) and a state that was copied
carries a copy of it.

It also collects the nodes touched since the fleet's views last looked (`take_changed`): the `progress`
report and the details line (`planning.views.fleet_status`) recompute only those nodes.

`CHECK`: tests set it; every `startable` is then compared with a fresh computation over every node, and a
difference (a change the rules did not report) fails loudly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass, field
from typing import Any

# Tests set this: every `startable` is checked against a computation from scratch.
CHECK = False
_ATTRIBUTE = "_work_index"


@dataclass
class WorkIndex:
    """Per fleet state: the startable nodes (None: not built), the nodes changed."""

    startable: set[str] | None = None
    # Bumped by every `touch_all`: what other caches of the state key on (`fleet_state.supply`).
    epoch: int = 0
    # Nodes touched since the views last took them; `all_changed`: every node may have changed.
    changed: set[str] = field(default_factory=set)
    all_changed: bool = True


def index_of(state: Any) -> WorkIndex:
    """The index of `state` (made empty on first use)."""
    index = state.__dict__.get(_ATTRIBUTE)
    if index is None:
        index = WorkIndex()
        state.__dict__[_ATTRIBUTE] = index
    return index


def startable(state: Any, compute: Callable[[Any, str], list[str]]) -> Set[str]:
    """Nodes with work wanted and no request in flight (read only: the index's own set)."""
    index = index_of(state)
    if index.startable is None:
        index.startable = {n for n in state.targets if n not in state.in_flight and compute(state, n)}
    if CHECK:
        fresh = {n for n in state.targets if n not in state.in_flight and compute(state, n)}
        if fresh != index.startable:
            raise AssertionError(f"work index out of date: missing {sorted(fresh - index.startable)}, "
                                 f"stale {sorted(index.startable - fresh)}")
    return index.startable


def touch(state: Any, nodes: Iterator[str] | list[str] | Set[str] | tuple[str, ...],
          compute: Callable[[Any, str], list[str]]) -> None:
    """These nodes changed (their record, target, request): place them again."""
    index = index_of(state)
    for node in nodes:
        index.changed.add(node)
        if index.startable is None:
            continue
        if node in state.targets and node not in state.in_flight and compute(state, node):
            index.startable.add(node)
        else:
            index.startable.discard(node)


def touch_all(state: Any) -> None:
    """Any node may have changed: the index starts over (rebuilt when next asked)."""
    index = index_of(state)
    index.startable = None
    index.epoch += 1
    index.changed.clear()
    index.all_changed = True


def take_changed(state: Any) -> tuple[bool, set[str]]:
    """(every node, the nodes) changed since the last call; the views recompute those."""
    index = index_of(state)
    every, nodes = index.all_changed, index.changed
    index.all_changed, index.changed = False, set()
    return every, nodes


class Remaining(Set[str]):
    """The nodes with work left in the wave: the startable ones and those in flight (a view, not a copy)."""

    def __init__(self, startable: Set[str], in_flight: Set[str]) -> None:
        self.startable = startable
        self.in_flight = in_flight

    def __contains__(self, node: object) -> bool:
        return node in self.startable or node in self.in_flight

    def __iter__(self) -> Iterator[str]:
        yield from self.startable
        yield from (n for n in self.in_flight if n not in self.startable)

    def __len__(self) -> int:
        return len(self.startable) + sum(1 for n in self.in_flight if n not in self.startable)
