"""What a drain does with each pod of its node: the drain rules of `spec.workloads`. Pure (no I/O).

The drain activity (activities/drain.py) turns the node's pods into `PodFacts` (kube/pod_facts.py)
and asks `plan_round` each round what to do; everything it decides is here:

* pods a drain never touches (`ignored`): DaemonSet pods, mirror pods, finished pods (Succeeded,
  Failed) and noderoll's own stage pods, as `kubectl drain` skips them;
* per other pod the first rule of `spec.workloads.rules` that matches (`rule_for`; api/workloads.py
  says when a rule matches) decides: `Evict` (also when no rule matches), `WaitForCompletion`
  (evicted once `timeoutSeconds` passed since the drain began, unless it finished or went first),
  `Delete` (deleted without the Eviction API), `Leave` (never touched; the drain does not wait for it);
* a pod whose `noderoll.io/eviction-at` lies ahead is not evicted or deleted before that time; with
  a notice (`noticeSeconds`), a pod the drain would evict or delete and that carries no such
  annotation (it came after the window's notice) gets one first (`eviction_at`), and waits for it;
* the drain is done when no pod is left but `Leave` and ignored ones; pods with emptyDir data that
  the drain may evict or delete fail it unless `deleteEmptyDirData`;
* the rule of each pod a drain waits on is named in its reports (`PodRule.describe`: "rule 2
  (WaitForCompletion, 600s)", counting from 1 as the rules are listed);
* `drain_bound`: a drain may take the Packages' `drain.timeoutSeconds` plus the longest
  `WaitForCompletion` timeout and the notice a late pod is owed (neither eats the eviction's own time);
* `skips_node`: with `onDrainTimeout: Skip`, a drain or protected-pods wait that ran out of time
  gives the node up instead of failing the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from api.enums import DrainAction, DrainTimeoutAction
from api.quantity import parse_quantity
from api.workloads import DrainRule
from protocol import errors

RUNNING_PHASES = ("Running", "Pending", "", None)
# Errors of a drain that ran out of time (what `onDrainTimeout: Skip` skips); an emptyDir refusal is not.
TIMEOUT_ERRORS = (errors.DRAIN_TIMEOUT, errors.PROTECTED_PODS_TIMEOUT)
# The value of the node label `noderoll.io/skipped` on a node whose drain timed out.
SKIPPED_DRAIN_TIMEOUT = "drain-timeout"


@dataclass(frozen=True)
class PodFacts:
    """What the drain reads of one pod (kube/pod_facts.py converts a Pod)."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # Requests or limits a positive quantity of a `*/gpu` extended resource (`uses_gpu`).
    gpu: bool = False
    phase: str = "Running"
    terminating: bool = False
    # The `noderoll.io/eviction-at` annotation ("" when absent).
    eviction_at: str = ""
    local_data: bool = False
    daemon_set: bool = False
    mirror: bool = False
    stage_pod: bool = False

    @property
    def ref(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


def is_gpu_resource(name: str) -> bool:
    """True for an extended resource named `<domain>/gpu` (nvidia.com/gpu, amd.com/gpu, ...)."""
    domain, slash, resource = name.partition("/")
    return bool(domain) and bool(slash) and resource == "gpu"


def _positive(quantity: Any) -> bool:
    try:
        return parse_quantity(quantity) > Decimal(0)
    except ValueError:
        return False  # a quantity the apiserver would not have stored


def uses_gpu(resources: Iterable[Mapping[str, Any]]) -> bool:
    """True when any container's `resources` (API JSON: `requests`, `limits`) asks for a `*/gpu` resource."""
    for container in resources:
        for kind in ("requests", "limits"):
            if any(is_gpu_resource(k) and _positive(v) for k, v in (container.get(kind) or {}).items()):
                return True
    return False


def ignored(pod: PodFacts) -> bool:
    """Pods a drain leaves alone: DaemonSet, mirror, finished, noderoll's stage pods."""
    return pod.daemon_set or pod.mirror or pod.stage_pod or pod.phase not in RUNNING_PHASES


@dataclass(frozen=True)
class PodRule:
    """The rule that decides a pod: its position in `rules` (None: no rule matched) and its action."""

    action: DrainAction = DrainAction.EVICT
    index: int | None = None
    timeout_seconds: int | None = None

    def describe(self) -> str:
        """`rule 2 (WaitForCompletion, 600s)`; "" when no rule matched (today's drain)."""
        if self.index is None:
            return ""
        timeout = f", {self.timeout_seconds}s" if self.timeout_seconds is not None else ""
        return f"rule {self.index + 1} ({self.action.value}{timeout})"


def rule_matches(rule: DrainRule, pod: PodFacts) -> bool:
    """Whether every criterion `rule` sets holds for `pod` (api/workloads.py)."""
    if rule.namespaces is not None and pod.namespace not in rule.namespaces:
        return False
    if rule.pod_selector is not None and not rule.pod_selector.matches(pod.labels):
        return False
    return rule.gpu_pods is None or rule.gpu_pods == pod.gpu


def rule_for(rules: Sequence[DrainRule], pod: PodFacts) -> PodRule:
    """The first rule matching `pod`, or `Evict` without a rule."""
    for index, rule in enumerate(rules):
        if rule_matches(rule, pod):
            return PodRule(rule.action, index, rule.timeout_seconds)
    return PodRule()


def drain_bound(timeout_seconds: int, rules: Sequence[DrainRule], notice_seconds: int = 0) -> int:
    """How long a drain may take: the Packages' drain timeout plus the longest WaitForCompletion timeout
    plus `noticeSeconds` (a pod that came after the window's notice waits its own)."""
    waits = [r.timeout_seconds or 0 for r in rules if r.action is DrainAction.WAIT_FOR_COMPLETION]
    return timeout_seconds + max(waits, default=0) + notice_seconds


def skips_node(on_timeout: DrainTimeoutAction, error_type: str) -> bool:
    """True when a window whose drain failed with `error_type` gives the node up (`onDrainTimeout: Skip`)."""
    return on_timeout is DrainTimeoutAction.SKIP and error_type in TIMEOUT_ERRORS


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time with its zone (an eviction-at annotation); None when absent or unreadable."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
    return parsed if parsed is not None and parsed.tzinfo is not None else None


def rfc3339(moment: datetime) -> str:
    """`2025-01-01T10:00:00Z` (UTC, whole seconds rounded up: a notice is never shorter than asked)."""
    whole = moment.replace(microsecond=0) + (timedelta(seconds=1) if moment.microsecond else timedelta())
    return whole.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def eviction_at(rule: PodRule, notice_at: datetime) -> datetime:
    """When a pod the notice names may be evicted: at the notice's end, a WaitForCompletion pod its timeout later."""
    wait = rule.timeout_seconds if rule.action is DrainAction.WAIT_FOR_COMPLETION else None
    return notice_at + timedelta(seconds=wait or 0)


@dataclass
class DrainRound:
    """What one round of a drain does (`plan_round`), pod lists sorted by reference."""

    evict: list[PodFacts] = field(default_factory=list)
    delete: list[PodFacts] = field(default_factory=list)
    # Pods the drain waits for: WaitForCompletion pods in their wait, pods whose eviction-at lies ahead.
    completing: list[tuple[PodFacts, PodRule]] = field(default_factory=list)
    noticed: list[PodFacts] = field(default_factory=list)
    # Pods to annotate with their eviction time first (they came after the notice): ref -> RFC 3339.
    announce: dict[str, str] = field(default_factory=dict)
    # Every pod the drain still waits to see gone (not Leave, not ignored).
    remaining: list[PodFacts] = field(default_factory=list)
    # Pods with emptyDir data the drain may evict or delete.
    local: list[PodFacts] = field(default_factory=list)
    rules: dict[str, PodRule] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """True when no pod is left to wait for."""
        return not self.remaining


@dataclass(frozen=True)
class RoundInput:
    """One round's view: the node's pods, the rules, when the drain began and now (aware datetimes)."""

    pods: Sequence[PodFacts]
    rules: Sequence[DrainRule] = ()
    started: datetime | None = None
    now: datetime | None = None
    notice_seconds: int = 0


def plan_round(given: RoundInput) -> DrainRound:
    """Decide one round of the drain (module rules)."""
    out = DrainRound()
    now, started = given.now, given.started
    for pod in sorted(given.pods, key=lambda p: p.ref):
        if ignored(pod):
            continue
        rule = rule_for(given.rules, pod)
        if rule.action is DrainAction.LEAVE:
            continue
        out.rules[pod.ref] = rule
        out.remaining.append(pod)
        if pod.local_data:
            out.local.append(pod)
        if pod.terminating:
            continue  # evicted or deleted already: it goes within its grace period
        if rule.action is DrainAction.WAIT_FOR_COMPLETION and not _waited(rule, started, now):
            out.completing.append((pod, rule))
            continue
        not_before = parse_time(pod.eviction_at)
        if not_before is None and given.notice_seconds and now is not None:
            out.announce[pod.ref] = rfc3339(max(now + timedelta(seconds=given.notice_seconds),
                                                eviction_at(rule, started or now)))
            out.noticed.append(pod)
            continue
        if not_before is not None and now is not None and now < not_before:
            out.noticed.append(pod)
            continue
        (out.delete if rule.action is DrainAction.DELETE else out.evict).append(pod)
    return out


def _waited(rule: PodRule, started: datetime | None, now: datetime | None) -> bool:
    if started is None or now is None:
        return False
    return (now - started).total_seconds() >= (rule.timeout_seconds or 0)


def described(pods: Iterable[str], rules: Mapping[str, PodRule]) -> list[str]:
    """Each pod reference, followed by its rule in parentheses when a rule decided it: `ns/a (rule 2 (...))`."""
    out = []
    for ref in sorted(pods):
        rule = rules.get(ref)
        text = rule.describe() if rule is not None else ""
        out.append(f"{ref} ({text})" if text else ref)
    return out


def completion_message(waiting: Sequence[tuple[PodFacts, PodRule]]) -> str:
    """The Draining condition's message while WaitForCompletion pods run: who, and by which rule."""
    rules = {pod.ref: rule for pod, rule in waiting}
    shown = described(rules, rules)
    more = f" and {len(shown) - 10} more" if len(shown) > 10 else ""
    return "waiting for pod(s) to complete: " + ", ".join(shown[:10]) + more
