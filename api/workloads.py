"""`spec.workloads` of a DeploymentPolicy: how a node window treats the pods it drains, as models. Pure.

Optional; a policy without it (or with every field at its default) drains exactly as before: every
pod evicted through the Eviction API with the Packages' `drain` settings, a drain that times out
fails the window.

* `noticeSeconds` (0-86400, default 0): at least this long before the window evicts or deletes a
  pod, the pod carries the annotation `noderoll.io/eviction-at` (RFC 3339) and the node the condition
  `noderoll.io/MaintenanceScheduled=True` (planning/node/eviction_notice.py). Only windows that drain give
  a notice; one that finds no pod to evict does not wait for it.
* `rules[]`: per pod the first rule that matches decides (planning/node/drain_rules.py). A rule matches
  a pod when every criterion it sets holds: `namespaces` (a non-empty list of namespace names; left
  out: every namespace), `podSelector` (a label selector; left out: every pod), `gpuPods` (`true`:
  pods that request or limit a positive quantity of any `*/gpu` extended resource in any container,
  init containers included; `false`: pods that do not; left out: both). `action`: `Evict` (the
  Eviction API, PodDisruptionBudgets respected), `WaitForCompletion` (wait up to `timeoutSeconds`,
  required and only allowed there, counted from the start of the drain, for the pod to finish
  (Succeeded, Failed or gone), then evict it; the drain may take that much longer than the Packages'
  `drain.timeoutSeconds`, and `noticeSeconds` longer for a pod that came after the window's notice),
  `Delete` (delete the pod with its own grace period, no Eviction API: for pods no
  PodDisruptionBudget should hold), `Leave` (never evicted; the drain does not wait for it and the
  interrupt goes ahead with it). No rule matches: `Evict`. DaemonSet, mirror and finished
  pods are never evicted, whatever the rules. A rule after one that matches every pod could never
  match, and is refused.
* `onDrainTimeout`: `Fail` (the default: the window ends erroring at stage `drain`) or `Skip`: when
  the drain (or the wait for the Packages' protected pods) runs out of time, the window gives the
  node up: uncordons it (its own cordon only), labels it `noderoll.io/skipped=drain-timeout`, runs
  nothing on it, and answers its Packages `blocked`, which counts as neither success nor failure for
  the batch thresholds and the canary, and frees the node's budget slot. The fleet asks the node
  again on `noderoll retry` (or in a new wave), not when the node changes; its next window removes
  the label. A drain refused for emptyDir data (`drain.deleteEmptyDirData`) still fails.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from api.base import SpecModel
from api.enums import DrainAction, DrainTimeoutAction
from api.selectors import LabelSelector

NOTICE_MAX_SECONDS = 86400
# A week: a WaitForCompletion rule keeps the node cordoned (and a budget slot taken) while it waits.
WAIT_MAX_SECONDS = 7 * 86400
_NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAMESPACE_HINT = "a namespace name: a lowercase DNS label of at most 63 characters (a-z, 0-9 and '-')"


def check_namespace(name: str) -> str:
    """Return `name` if it is a valid namespace name, else raise ValueError saying what is valid."""
    if len(name) > 63 or not _NAMESPACE_RE.match(name):
        raise ValueError(f"{name!r} is not {NAMESPACE_HINT}")
    return name


class DrainRule(SpecModel):
    """One entry of `spec.workloads.rules`: which pods (every criterion set must hold) and what the drain does."""

    namespaces: list[str] | None = None
    pod_selector: LabelSelector | None = None
    gpu_pods: bool | None = None
    action: DrainAction
    timeout_seconds: int | None = Field(default=None, ge=1, le=WAIT_MAX_SECONDS)

    @field_validator("namespaces")
    @classmethod
    def _namespaces_valid(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("namespaces is empty; list at least one namespace, or leave namespaces out to match "
                             "pods of every namespace")
        seen: set[str] = set()
        for name in value:
            check_namespace(name)
            if name in seen:
                raise ValueError(f"namespace {name!r} is listed twice")
            seen.add(name)
        return value

    @model_validator(mode="after")
    def _timeout_fits_action(self) -> DrainRule:
        waits = self.action is DrainAction.WAIT_FOR_COMPLETION
        if waits and self.timeout_seconds is None:
            raise ValueError("action WaitForCompletion needs timeoutSeconds (how long to wait for the pod to finish "
                             "before it is evicted)")
        if not waits and self.timeout_seconds is not None:
            raise ValueError(f"timeoutSeconds is only used by action WaitForCompletion (how long to wait for the pod "
                             f"to finish); remove it for action {self.action.value}")
        return self

    def matches_every_pod(self) -> bool:
        """True when the rule sets no criterion (or only an empty selector): every pod matches it."""
        return self.namespaces is None and self.gpu_pods is None and (
            self.pod_selector is None or self.pod_selector.is_empty())


class WorkloadsSpec(SpecModel):
    """`spec.workloads`: the eviction notice, the per-workload drain rules and what a drain timeout does."""

    notice_seconds: int = Field(default=0, ge=0, le=NOTICE_MAX_SECONDS)
    rules: list[DrainRule] = Field(default_factory=list)
    on_drain_timeout: DrainTimeoutAction = DrainTimeoutAction.FAIL

    @model_validator(mode="after")
    def _every_rule_reachable(self) -> WorkloadsSpec:
        for index, rule in enumerate(self.rules[:-1]):
            if rule.matches_every_pod():
                raise ValueError(
                    f"rules[{index}] matches every pod (no namespaces, podSelector or gpuPods), so rules[{index + 1}] "
                    f"and after are never used; move the catch-all rule last or give it a criterion")
        return self
