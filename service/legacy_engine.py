"""The per-Package engine of releases before fleets, as far as a newer process must know it. Does I/O (Temporal).

Until the one-engine release (ADR 0013) a Package could roll out in its own workflow
(`package/<name>`, type `RolloutWorkflow`) with disruption budgets in `budget/<policy>/<compartment>`
(type `BudgetWorkflow`). Their code is gone: a worker of this release cannot run them, and a bridge
of this release would start fleets next to them. So `noderoll worker` and `noderoll bridge` look
for open runs of those types in their namespace when they start, and refuse to start while there
are any (`refuse_legacy_runs`), naming them and the command that finishes them:
`noderoll migrate --finish-legacy` (`cli/migrate_command.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.client import Client

from protocol.names import LEGACY_WORKFLOW_TYPES

FINISH_COMMAND = "noderoll migrate --finish-legacy"
# Open runs named in the refusal; the rest are counted.
SHOWN = 10


@dataclass(frozen=True)
class LegacyRun:
    """One open run of the retired engine."""

    workflow_id: str
    workflow_type: str
    task_queue: str


def legacy_query() -> str:
    """The visibility query of open runs of the retired engine's workflow types."""
    types = " OR ".join(f"WorkflowType = '{t}'" for t in LEGACY_WORKFLOW_TYPES)
    return f"ExecutionStatus = 'Running' AND ({types})"


async def open_legacy_runs(client: Client) -> list[LegacyRun]:
    """Every open run of `RolloutWorkflow` and `BudgetWorkflow` in the client's namespace, by id."""
    runs = [LegacyRun(e.id, e.workflow_type, e.task_queue) async for e in client.list_workflows(legacy_query())]
    return sorted(runs, key=lambda r: r.workflow_id)


def refusal(process: str, namespace: str, runs: list[LegacyRun]) -> str:
    """Why `process` does not start while `runs` are open (pure)."""
    shown = ", ".join(r.workflow_id for r in runs[:SHOWN])
    more = f" and {len(runs) - SHOWN} more" if len(runs) > SHOWN else ""
    return (f"noderoll {process}: refusing to start: {len(runs)} workflow(s) of the retired per-Package engine "
            f"are open in Temporal namespace {namespace!r}: {shown}{more}. This release cannot run them. "
            f"Finish them with `{FINISH_COMMAND}` while the previous release's worker still runs (it halts "
            "them, waits for their node windows in flight, uncordons the nodes noderoll left cordoned and "
            "terminates them; docs/operations.md, \"Upgrading from the per-Package engine\"), then start again.")


async def refuse_legacy_runs(client: Client, process: str) -> None:
    """Raise SystemExit with `refusal` when the retired engine has open runs in the namespace."""
    runs = await open_legacy_runs(client)
    if runs:
        raise SystemExit(refusal(process, client.namespace, runs))
