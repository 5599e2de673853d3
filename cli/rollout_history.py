"""A rollout as its Temporal histories tell it: the fleet's runs and its nodes' window runs. Does I/O (Temporal).

`fleet_histories(client, policy, cluster)` follows the latest run of `fleet/<policy>` (a cluster's:
`fleet/<cluster>/<policy>`) back through continue-as-new; `node_histories(client, node, since, cluster)`
lists the runs of `node/<node>` (`node/<cluster>/<node>`) started since a time (each run is one or more windows: the node workflow completes when nothing is
queued). `activities(history)` and `signals(history, name)` read a history into plain data: each
activity with its type, its input and result (the JSON the pydantic converter wrote), when it was
scheduled, started (the last attempt) and ended, its attempts and its failure; each signal with its
time and payload. `noderoll report` and the plan-equals-rollout test read rollouts through these.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from planning.views.rollout_report import ActivityRun, RunHistory, Signal
from protocol import names


def _json(payloads: Payloads) -> Any:
    if not payloads.payloads:
        return None
    try:
        return json.loads(payloads.payloads[0].data)
    except ValueError:
        return None


_CLOSED = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}


def read_history(history: WorkflowHistory, run_id: str = "") -> RunHistory:
    """`history` as plain data (module docstring)."""
    events = list(history.events)
    run = RunHistory(history.workflow_id, run_id, events[0].event_time.ToDatetime().astimezone())
    by_event: dict[int, ActivityRun] = {}
    for event in events:
        when = event.event_time.ToDatetime().astimezone()
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            by_event[event.event_id] = activity = ActivityRun(attrs.activity_type.name, _json(attrs.input), when)
            run.activities.append(activity)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            activity = by_event[started.scheduled_event_id]
            activity.started, activity.attempts = when, max(started.attempt, 1)
            if started.HasField("last_failure") and not activity.failure:
                activity.failure = started.last_failure.message
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            activity = by_event[done.scheduled_event_id]
            activity.ended, activity.outcome, activity.result = when, "completed", _json(done.result)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failed = event.activity_task_failed_event_attributes
            activity = by_event[failed.scheduled_event_id]
            activity.ended, activity.outcome, activity.failure = when, "failed", failed.failure.message
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            timed_out = event.activity_task_timed_out_event_attributes
            activity = by_event[timed_out.scheduled_event_id]
            activity.ended, activity.outcome = when, "timed out"
            activity.failure = timed_out.failure.message or "timed out"
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
            canceled = event.activity_task_canceled_event_attributes
            activity = by_event[canceled.scheduled_event_id]
            activity.ended, activity.outcome = when, "canceled"
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = event.workflow_execution_signaled_event_attributes
            run.signals.append(Signal(signaled.signal_name, when, _json(signaled.input)))
        elif kind in _CLOSED:
            run.closed = when
    return run


async def fleet_histories(client: Client, policy: str, cluster: str = "") -> list[RunHistory]:
    """The latest run of `fleet/<policy>` (`fleet/<cluster>/<policy>`) and the runs it continued from,
    oldest first."""
    workflow_id = names.fleet_workflow_id(policy, cluster)
    runs: list[RunHistory] = []
    run_id = ""
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id or None)
        history = await handle.fetch_history()
        first = history.events[0].workflow_execution_started_event_attributes
        runs.insert(0, read_history(history, run_id or (await handle.describe()).run_id))
        run_id = first.continued_execution_run_id
        if not run_id:
            return runs


async def node_histories(client: Client, node: str, since: datetime, cluster: str = "") -> list[RunHistory]:
    """The runs of `node/<node>` (`node/<cluster>/<node>`) started at or after `since`, oldest first."""
    workflow_id = names.node_workflow_id(node, cluster)
    query = f"WorkflowId = '{workflow_id}' AND StartTime >= '{since.isoformat()}'"
    found = [(e.start_time, e.run_id) async for e in client.list_workflows(query)]
    runs = []
    for _start, run_id in sorted(found):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(read_history(history, run_id))
    return runs
