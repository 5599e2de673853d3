"""`noderoll <command>` builds its parser from the command's own module only (cli/main.py STANDALONE)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from cli import main


@pytest.mark.parametrize("command", sorted(main.STANDALONE))
def test_a_standalone_command_is_registered_by_its_module(command: str) -> None:
    parser = main.build_parser(main.modules_for([command]))
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert command in choices, sorted(choices)
    # Its module is one of the full parser's (the command means the same in `noderoll --help`).
    assert all(m in main.COMMAND_MODULES for m in main.STANDALONE[command])
    assert importlib.import_module(main.STANDALONE[command][0])


def test_status_imports_neither_the_bridge_nor_the_bench_nor_the_demo() -> None:
    code = ("import sys; from cli import main; main.build_parser(main.modules_for(['status', '--fleet', 'x'])); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'crd_bridge', 'bench', 'demo', 'fleetsim'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
