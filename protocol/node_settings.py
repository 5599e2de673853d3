"""The failure policy of a new node workflow, tuned by the environment of the process that starts it.

Every starter of `node/<node>` uses it through `protocol.node.node_workflow_input`: the fleet's
activity `request_windows`, the bridge and the CLI (a `reset`). Defaults are those of
`protocol.node.NodeWorkflowInput` (the bounds' defaults are defined here, below, so that `api`
reads them without loading a Temporal client); `NODEROLL_NODE_STAGE_ATTEMPTS` (attempts per stage) and
`NODEROLL_NODE_RETRY_BACKOFF_SECONDS` (backoff before the second attempt, doubling after) change
them, and so do the defaults of the bounds a Package's `limits` override (seconds):
`NODEROLL_NODE_PROTECTED_PODS_TIMEOUT_SECONDS` (3600), `NODEROLL_NODE_STAGE_TIMEOUT_SECONDS` (1800),
`NODEROLL_NODE_INTERRUPT_TIMEOUT_SECONDS` (900). Reads the environment only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Defaults of the bounds a Package's `limits` override (seconds).
DEFAULT_PROTECTED_PODS_TIMEOUT_SECONDS = 3600
DEFAULT_STAGE_TIMEOUT_SECONDS = 1800
DEFAULT_INTERRUPT_TIMEOUT_SECONDS = 900

# `protocol.node.start_window` asks for an eager start (issue #26): the run's first workflow task goes
# to the worker that starts it. Off by default: with several workers on one task queue, every window
# a fleet's activity starts would then run on that activity's worker (sticky, and its activities
# eagerly too), instead of being shared; on for one worker (the bench sets it).
EAGER_START_ENV = "NODEROLL_EAGER_NODE_START"
STAGE_ATTEMPTS_ENV = "NODEROLL_NODE_STAGE_ATTEMPTS"
RETRY_BACKOFF_ENV = "NODEROLL_NODE_RETRY_BACKOFF_SECONDS"
PROTECTED_PODS_TIMEOUT_ENV = "NODEROLL_NODE_PROTECTED_PODS_TIMEOUT_SECONDS"
STAGE_TIMEOUT_ENV = "NODEROLL_NODE_STAGE_TIMEOUT_SECONDS"
INTERRUPT_TIMEOUT_ENV = "NODEROLL_NODE_INTERRUPT_TIMEOUT_SECONDS"
# Environment variable -> the NodeWorkflowInput field it sets (whole seconds, at least 1).
TIMEOUT_ENVS = {
    PROTECTED_PODS_TIMEOUT_ENV: "protected_pods_timeout_seconds",
    STAGE_TIMEOUT_ENV: "stage_timeout_seconds",
    INTERRUPT_TIMEOUT_ENV: "reboot_timeout_seconds",
}


def node_workflow_settings(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """The `NodeWorkflowInput` fields the environment sets (none set: {}, the input's defaults)."""
    env = os.environ if environ is None else environ
    tuned: dict[str, float] = {}
    if env.get(STAGE_ATTEMPTS_ENV):
        tuned["stage_attempts"] = max(1, int(env[STAGE_ATTEMPTS_ENV]))
    if env.get(RETRY_BACKOFF_ENV):
        tuned["retry_backoff_seconds"] = max(0.0, float(env[RETRY_BACKOFF_ENV]))
    for name, field in TIMEOUT_ENVS.items():
        if env.get(name):
            tuned[field] = max(1, int(env[name]))
    return tuned


def eager_node_start(env: Mapping[str, str] | None = None) -> bool:
    """True when `NODEROLL_EAGER_NODE_START` is 1, true or yes (see EAGER_START_ENV). Pure but for the default."""
    values = os.environ if env is None else env
    return values.get(EAGER_START_ENV, "").strip().lower() in ("1", "true", "yes")
