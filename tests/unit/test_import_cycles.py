"""No import circle anywhere in noderoll's product code (issue 25 item 4), `TYPE_CHECKING` imports included.

The layers contract (`.importlinter`) orders the packages; a circle between two modules of one package
(two modules that each need the other, as the node window and its pods once did) is what it cannot
see. The graph is grimp's, the library import-linter itself builds on.
"""

from __future__ import annotations

import configparser
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def product_packages() -> list[str]:
    """The root packages the import contracts cover (`.importlinter`)."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config["importlinter"]["root_packages"].split()


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan), each sorted; and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(module: str) -> None:
        nonlocal counter
        index[module] = low[module] = counter
        counter += 1
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            members = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.append(top)
                if top == module:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_back() -> None:
    graph = grimp.build_graph(*product_packages(), cache_dir=None)
    assert circles(graph) == []


def test_the_search_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.y", imported="a.z")
    assert circles(graph) == [["a.x", "a.y"]]
