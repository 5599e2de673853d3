"""The `noderoll` console script ends through `cli.main.run`: `sys.exit(main())`'s codes, no finalization.

Why it must not finalize the interpreter: cli/process_exit.py and tests/integration/test_process_exit.py.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from cli import main as cli_main


class Exited(Exception):
    """Raised by the stand-in for os._exit's caller: the code `run` ended with."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@pytest.fixture
def ended_with(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(cli_main, "exit_process", fake_exit)


def code_of_run(monkeypatch: pytest.MonkeyPatch, outcome: object) -> int:
    def fake_main() -> object:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(cli_main, "main", fake_main)
    with pytest.raises(Exited) as exited:
        cli_main.run()
    return exited.value.code


def test_the_installed_console_script_is_run() -> None:
    (script,) = entry_points(group="console_scripts", name="noderoll")
    assert script.value == "cli.main:run"


@pytest.mark.parametrize(("outcome", "code"), [
    (0, 0), (3, 3), (None, 0), (SystemExit(2), 2), (SystemExit(None), 0), (SystemExit("bad flag"), 1),
    (RuntimeError("boom"), 1),
])
def test_run_exits_with_the_code_sys_exit_would_give(
    ended_with: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], outcome: object, code: int
) -> None:
    assert code_of_run(monkeypatch, outcome) == code
    err = capsys.readouterr().err
    if isinstance(outcome, RuntimeError):
        assert "Traceback" in err and "RuntimeError: boom" in err
    if isinstance(outcome, SystemExit) and isinstance(outcome.code, str):
        assert "bad flag" in err


def test_argparse_errors_keep_their_exit_code(ended_with: None, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["noderoll", "--no-such-flag"])
    with pytest.raises(Exited) as exited:
        cli_main.run()
    assert exited.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
