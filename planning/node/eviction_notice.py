"""The eviction notice of a node window (`spec.workloads.noticeSeconds`): who is told what. Pure (no I/O).

A window that drains gives its notice after the cordon and the wait for protected pods, before the
drain: `notice_at` is the window's clock plus `noticeSeconds`. Every pod the drain will evict or
delete (planning/node/drain_rules.py: not ignored, its rule not `Leave`) gets the annotation
`noderoll.io/eviction-at` with the time it may be evicted from (`notices`: the notice's end; for a
`WaitForCompletion` pod its timeout later), and the node the condition
`noderoll.io/MaintenanceScheduled=True` (reason `EvictionScheduled`, `condition_message`: when, how
many pods, which fleet). The window then waits on a durable timer, `noticeSeconds` from the moment the
last pod was told (so the drain never starts before the time announced), and drains;
the drain evicts no pod before its annotation's time (pods that came after the notice are
annotated by the drain and wait for their own notice). Both are removed when the window ends
(success, failure or skip): the annotation from the pods still on the node, the condition from
the node. A window that does not drain gives no notice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from api.enums import DrainAction
from api.workloads import DrainRule
from planning.node.drain_rules import PodFacts, eviction_at, ignored, rfc3339, rule_for

REASON_SCHEDULED = "EvictionScheduled"
EVENT_SCHEDULED = "EvictionScheduled"


def notices(pods: Sequence[PodFacts], rules: Sequence[DrainRule], notice_at: datetime) -> dict[str, str]:
    """Pod reference -> the RFC 3339 time it may be evicted from, for every pod the drain will evict or delete."""
    out = {}
    for pod in sorted(pods, key=lambda p: p.ref):
        if ignored(pod) or pod.terminating:
            continue
        rule = rule_for(rules, pod)
        if rule.action is not DrainAction.LEAVE:
            out[pod.ref] = rfc3339(eviction_at(rule, notice_at))
    return out


def condition_message(notice_at: datetime, pods: int, fleet: str) -> str:
    """`evicting 3 pod(s) from 2025-01-01T10:00:00Z (node window of fleet/gpu-policy)`."""
    return f"evicting {pods} pod(s) from {rfc3339(notice_at)} (node window of {fleet or 'a fleet'})"
