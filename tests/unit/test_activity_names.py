"""Workflows call activities by name (ADR 0002): every name they use is registered by the worker."""

from __future__ import annotations

import ast
from pathlib import Path

from temporalio import activity

from worker.registry import ACTIVITIES

WORKFLOWS_DIR = Path(__file__).resolve().parents[2] / "workflows"
CALLS = {"execute_activity", "start_activity", "execute_local_activity", "start_local_activity"}


def activity_names_used() -> dict[str, str]:
    """Name literal -> `file:line` of its first use, over every workflow module."""
    used: dict[str, str] = {}
    for path in sorted(WORKFLOWS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr in CALLS and node.args and isinstance(node.args[0], ast.Constant):
                used.setdefault(str(node.args[0].value), f"{path.name}:{node.lineno}")
    return used


def test_every_activity_name_a_workflow_uses_is_registered() -> None:
    registered = {activity._Definition.must_from_callable(fn).name for fn in ACTIVITIES}
    used = activity_names_used()
    assert used, "no activity calls found: did the workflows stop calling activities by name?"
    missing = {name: where for name, where in used.items() if name not in registered}
    assert not missing, f"activity names used by workflows but not registered by the worker: {missing}"
