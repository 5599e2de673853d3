"""`close_window`: the end of a node window in one activity (issue #26 item 2). Does I/O.

A window used to end with three activities, each a workflow task and six history events: uncordon
(a read and a guarded patch), the final state write, and the deletion of its stage pods. The
window knows whether noderoll cordoned the node (`cordon_node`'s answer), so the cordon is lifted
in the state write's own node patch (the annotation `noderoll.io/cordoned-by` removed and
`unschedulable` unset, exactly what `uncordon_node` patches), and the pods are deleted right after
the state is on the node, as before. The activity is retried until the API answers (the workflow's
`CLOSE_RETRY`, as uncordon and the final state were); every step is idempotent (the patch is the
same, the Events carry their keys, a deletion finds nothing). The deletion's failure does not
fail the activity: the pods are left for the package's next window. A window that gave an eviction
notice (`spec.workloads.noticeSeconds`) takes it back after the state write (`clear_notice`): the
annotation off the pods still on the node, the condition off the node (activities/eviction_notice.py).
"""

from __future__ import annotations

import logging

from temporalio import activity

from activities.eviction_notice import withdraw_notice
from activities.nodes import write_state
from activities.stage_cleanup import delete_stage_jobs
from protocol.activity_refs import CLOSE_WINDOW
from protocol.node_activities import CloseWindowInput, CloseWindowResult

log = logging.getLogger(__name__)


@activity.defn(name=CLOSE_WINDOW.name)
def close_window(input: CloseWindowInput) -> CloseWindowResult:
    """The final state (and the uncordon, in the same patch), then the stage pods' deletion."""
    write_state(input.state, uncordon=input.uncordon)
    if input.clear_notice:
        withdraw_notice(input.state.node)
    result = CloseWindowResult()
    if input.delete is not None and input.delete.packages:
        try:
            result.deleted = delete_stage_jobs(input.delete)
        except Exception as err:  # noqa: BLE001 - left for the next window (module docstring)
            log.warning("deleting stage pods of %s on %s failed: %s", input.delete.packages, input.delete.node, err)
            result.delete_error = f"{type(err).__name__}: {err}"
    return result
