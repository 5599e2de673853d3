"""Activities are called by reference, not by a name written at both ends (protocol/activity_refs.py, issue 43):
every workflow calls an activity through a reference's `.name`, every activity registers under one, and the
references are exactly the activities the worker registers."""

from __future__ import annotations

import ast
from pathlib import Path

from temporalio import activity

from protocol import activity_refs
from worker.registry import ACTIVITIES

ROOT = Path(__file__).resolve().parents[2]
CALLS = {"execute_activity", "start_activity", "execute_local_activity", "start_local_activity", "short_call"}
REFS = {name for name in dir(activity_refs) if isinstance(getattr(activity_refs, name), activity_refs.ActivityRef)}


def _first_arguments(directory: str, functions: set[str]) -> list[tuple[str, ast.expr]]:
    """(`file:line`, first argument) of every call of one of `functions` under `directory`."""
    found = []
    for path in sorted((ROOT / directory).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in functions:
                found.append((f"{path.name}:{node.lineno}", node.args[0]))
    return found


def _is_reference(arg: ast.expr) -> bool:
    return (isinstance(arg, ast.Attribute) and arg.attr == "name" and isinstance(arg.value, ast.Name)
            and arg.value.id in REFS)


def test_workflows_call_every_activity_through_a_reference() -> None:
    calls = [(where, arg) for where, arg in _first_arguments("workflows", CALLS) if where.split(":")[0] != "short_calls.py"]
    assert calls, "no activity calls found under workflows/"
    literal = [where for where, arg in calls if not _is_reference(arg)]
    assert not literal, f"activity calls not through protocol.activity_refs: {literal}"


def test_every_activity_registers_under_a_reference() -> None:
    for path in sorted((ROOT / "activities").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "activity.defn":
                name = next((k.value for k in node.keywords if k.arg == "name"), None)
                assert name is not None and _is_reference(name), f"{path.name}:{node.lineno}: not a reference's name"


def test_the_references_are_the_activities_the_worker_registers() -> None:
    registered = {activity._Definition.must_from_callable(fn).name for fn in ACTIVITIES}
    assert {ref.name for ref in activity_refs.EVERY} == registered
    assert len(activity_refs.EVERY) == len(REFS)
