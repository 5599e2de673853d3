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

from collections.abc import Collection, Iterable, Mapping


class DependencyCycleError(ValueError):
    """A dependency cycle; `path` lists it with the first name repeated at the end."""

    def __init__(self, path: list[str]) -> None:
        self.path = path
        super().__init__(f"dependency cycle: {' -> '.join(path)}")


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle in `graph` (name -> names it depends on) as a path `[a, b, a]`, or None.

    Only edges between names present as keys count. The first cycle found when walking names
    in sorted order is reported, so the result is deterministic.
    """
    nodes = {name: sorted(d for d in deps if d in graph) for name, deps in graph.items()}
    # 0 = unvisited, 1 = on the current path, 2 = done.
    color: dict[str, int] = dict.fromkeys(nodes, 0)
    for root in sorted(nodes):
        if color[root]:
            continue
        path: list[str] = [root]
        stack: list[Iterable[str]] = [iter(nodes[root])]
        color[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                stack.pop()
                continue
            if color[nxt] == 1:
                return path[path.index(nxt) :] + [nxt]
            if color[nxt] == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append(iter(nodes[nxt]))
    return None


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
