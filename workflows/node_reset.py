"""A reset inside the node workflow: forget recorded state between windows. Deterministic, no I/O.

`node/<node>` receives `reset` (a `protocol.fleet.NodeReset`, signal-with-start: `noderoll node
reset`, `temporal workflow signal-with-start`, or the bridge for the Node annotation
`noderoll.io/reset`) and applies it when no window runs, in the order received: read the node
(`read_node`), decide the record left (`planning.node.node_reset.reset_state`, pure) and write it with
the usual state write (`write_node_state`: annotation and label in one patch, the conditions
`Updating`/`Erroring` and `StateMalformed` False, a `StateReset` Event). So the node workflow stays
the single writer of `noderoll.io/state`, and a reset never lands in the middle of a window.
A reset from the annotation removes the annotation in the same patch.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from api.keys import RESET_ANNOTATION
    from planning.node.node_reset import reset_state
    from protocol import errors
    from protocol.activity_refs import READ_NODE, WRITE_NODE_STATE
    from protocol.fleet import NodeReset
    from protocol.node_activities import NodeEvent, NodeInput, ReadNodeResult, WriteNodeStateInput
    from workflows.api_retries import API_RETRY, API_TIMEOUT

# Reset ids the bridge derives from the Node annotation start with this (the annotation is then removed).
ANNOTATION_RESET_PREFIX = "annotation:"


async def apply_reset(node: str, request: NodeReset) -> str:
    """Forget what `request` names on `node`; returns what was done (for the log)."""
    try:
        snapshot = await workflow.execute_activity(
            READ_NODE.name, NodeInput(node), result_type=ReadNodeResult,
            start_to_close_timeout=API_TIMEOUT, retry_policy=API_RETRY, summary="read node (reset)")
    except ActivityError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.type == errors.NODE_NOT_FOUND:
            return f"node {node} does not exist: nothing to reset"
        raise
    outcome = reset_state(snapshot.state_annotation, request.packages)
    who = f" (asked by {request.source})" if request.source else ""
    event = NodeEvent("StateReset", f"reset {request.id}: {outcome.message}{who}", key=f"reset/{request.id}")
    clear = [RESET_ANNOTATION] if request.id.startswith(ANNOTATION_RESET_PREFIX) else []
    await workflow.execute_activity(
        WRITE_NODE_STATE.name,
        WriteNodeStateInput(node=node, state_annotation=outcome.annotation, status=outcome.status.value,
                            updating=False, erroring=outcome.erroring, message=f"reset: {outcome.message}",
                            events=[event], clear_annotations=clear),
        start_to_close_timeout=API_TIMEOUT, retry_policy=API_RETRY, summary=f"reset {request.id}")
    return outcome.message
