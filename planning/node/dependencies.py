"""Dependency order of the packages pending on one node. Pure (no I/O).

Rules:
* edges come from `dependsOn` (dependent -> dependency); only dependencies that are themselves
  pending on the node order anything: one that is already complete (or not targeted here) is
  satisfied and imposes no wait;
* a dependent waits only for its own dependencies (unlike NodeWright, where every dependent
  waits for every root package);
* among packages whose dependencies are satisfied, order is by name (stable and deterministic);
* a cycle is an error naming the path, e.g. `a -> b -> c -> a` (NodeWright accepts cycles and
  then never runs the packages).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from api.graph import find_cycle


class DependencyCycleError(ValueError):
    """A dependency cycle; `path` lists it with the first name repeated at the end."""

    def __init__(self, path: list[str]) -> None:
        self.path = path
        super().__init__(f"dependency cycle: {' -> '.join(path)}")


def topological_order(pending: Mapping[str, Collection[str]]) -> list[str]:
    """Pending package names, each after its pending dependencies; ties by name.

    `pending` maps each pending package to its dependency names (any, pending or not).
    Raises DependencyCycleError when the pending packages depend on each other in a cycle.
    """
    cycle = find_cycle(pending)
    if cycle is not None:
        raise DependencyCycleError(cycle)
    done: set[str] = set()
    order: list[str] = []
    remaining = set(pending)
    while remaining:
        ready = sorted(n for n in remaining if all(d in done or d not in pending for d in pending[n]))
        # `ready` is never empty here: there is no cycle.
        order.extend(ready)
        done.update(ready)
        remaining.difference_update(ready)
    return order


def ready_packages(pending: Mapping[str, Collection[str]], complete: Collection[str]) -> list[str]:
    """Pending packages that may start now: every dependency complete or not pending. Sorted.

    A package in `complete` is not returned. Dependencies neither pending nor complete are
    treated as satisfied (they were validated to exist; they are simply not on this node's list).
    """
    waiting = {n for n in pending if n not in complete}
    return sorted(n for n in waiting if all(d in complete or d not in waiting for d in pending[n]))
