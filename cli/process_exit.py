"""End a noderoll process without interpreter finalization, because the Temporal client can abort it.

The Temporal SDK's Rust core completes each client call on one of its own threads, which takes the
GIL to hand the result to the event loop and takes it back once the loop's thread is woken. When
that last call was the process's final one, the main thread can already be finalizing the
interpreter by then, and CPython aborts the process: "Fatal Python error: PyGILState_Release:
thread state ... must be current when releasing", exit 134 (SIGABRT) after the command succeeded
(temporalio/sdk-python#300, open). A loop of 100 short client processes aborted 3 times here.
Skipping finalization is the one exit that cannot race those threads: flush what the process
wrote, run the `atexit` handlers a normal exit runs, then `os._exit`.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    """Exit with `code` as `sys.exit` would, minus the interpreter finalization that can abort."""
    atexit._run_exitfuncs()  # logging's own handler among them: its files and streams are flushed
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written anyway
            pass
    os._exit(code)
