"""Graph helpers on names (a dependency graph of Packages). Pure.

Here, at the bottom with the contract types, so both `api/validation.py` (a cycle is an invalid spec)
and `planning/node/dependencies.py` (order of work) use one implementation without `api` importing
`planning` (import contract `layers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


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
