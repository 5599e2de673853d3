"""The agent's mode vocabulary and exit codes. Pure constants.

The agent runs in the package pod and imports no other noderoll package, so the stage list is
duplicated here from `api.enums.Stage` (a unit test keeps the two in step).
"""

from __future__ import annotations

STAGES: tuple[str, ...] = ("uninstall", "upgrade", "apply", "config", "interrupt", "post-interrupt")
CHECK_SUFFIX = "-check"
INTERRUPT_MODE = "interrupt"
# Every mode a package's config.json may define: each stage but `interrupt`, and each one's check.
STEP_MODES: tuple[str, ...] = tuple(
    mode for stage in STAGES if stage != INTERRUPT_MODE for mode in (stage, stage + CHECK_SUFFIX)
)
# Modes the agent accepts on its command line (`interrupt-check` is accepted and has no steps).
ALL_MODES: tuple[str, ...] = (*STEP_MODES, INTERRUPT_MODE, INTERRUPT_MODE + CHECK_SUFFIX)
# Modes whose steps always rerun: config changes and version moves must redo their work (NodeWright).
ALWAYS_RERUN_MODES: frozenset[str] = frozenset({"config", "uninstall", "upgrade"})
# A successful check of these modes records the installed version in the history file.
HISTORY_MODES: frozenset[str] = frozenset({"apply-check", "upgrade-check", "uninstall-check"})


def is_check(mode: str) -> bool:
    """True for a `-check` mode (check modes always run every step, never skip)."""
    return mode.endswith(CHECK_SUFFIX)


# Exit codes (documented in docs/agent.md). A failing step's own exit code passes through unchanged;
# these are the agent's own, chosen in the sysexits range so they rarely collide with a step's.
EXIT_OK = 0
EXIT_STEP_FAILED = 1  # a step exited 0 but 0 was not an accepted return code, or was killed by a signal
# A step or interrupt command that exits N (1-255) makes the agent exit N; one killed by signal N, 128+N.
EXIT_USAGE = 64  # unknown mode or bad command line
EXIT_CONFIG_INVALID = 65  # config.json unreadable or not the v1 schema
EXIT_CONFIG_MISSING = 66  # no config.json in the package directory
EXIT_CONFIG_FILE_MISSING = 67  # an `expected_config_files` entry is not in the config dir
EXIT_INTERRUPT_INVALID = 68  # NODEROLL_INTERRUPT missing or not valid JSON of a known type
EXIT_REBOOT_NOT_DONE = 69  # the reboot command exited 0 but the host did not shut down in time
EXIT_INTERNAL = 70  # a defect of the agent itself (an unexpected exception; its traceback precedes)
EXIT_HOST = 71  # the host root cannot be used (missing, chroot refused, unwritable)
EXIT_STEP_NOT_EXECUTABLE = 126  # shell convention: found but not executable
EXIT_STEP_NOT_FOUND = 127  # shell convention: step path does not exist
EXIT_TERMINATED = 143  # SIGTERM received: stopped before the next step
