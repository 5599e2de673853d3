"""The node window's short Kubernetes calls as local activities (ADR 0020). Deterministic, no I/O.

The node's read, the window's first state write and the cordon are single API calls of tens of
milliseconds that do not heartbeat. As activities each cost a round trip through the Temporal
server and a workflow task of its own (scheduled, queued behind the other windows of its batch,
run), which is most of a short call's time in a batch. As local activities they run on the worker
holding the workflow task, one after the other in the window's first workflow task, and each
leaves one marker in the history.

Their retry policies are the activities' (`workflows.api_retries`): attempts within a minute of
backoff run in the worker, longer backoffs as workflow timers, and a failure beyond the policy is
the same `ActivityError`. What differs: a local activity's attempts are not listed as a pending
activity in the Temporal UI (the worker logs each failed attempt), which is why the window's
closing call, retried until the API answers, stays an activity.

Histories recorded before the patch `short-calls-local` replay their activities.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.api_retries import API_RETRY, API_TIMEOUT

SHORT_CALLS_LOCAL = "short-calls-local"


async def short_call(activity: str, arg: Any, result_type: type, summary: str,
                     retry_policy: RetryPolicy = API_RETRY) -> Any:
    """Run `activity` (a short call registered by the worker) as a local activity; as an activity in
    runs recorded before the patch."""
    execute = workflow.execute_local_activity if workflow.patched(SHORT_CALLS_LOCAL) else workflow.execute_activity
    return await execute(activity, arg, result_type=result_type, start_to_close_timeout=API_TIMEOUT,
                         retry_policy=retry_policy, summary=summary)
