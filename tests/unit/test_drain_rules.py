"""The drain rules of `spec.workloads` (planning/node/drain_rules.py) and the eviction notice
(planning/node/eviction_notice.py): which rule decides a pod, what each round of a drain does, who is told.
Pure: tables and hypothesis properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.enums import DrainAction, DrainTimeoutAction
from api.workloads import DrainRule
from planning.node.drain_rules import (
    SKIPPED_DRAIN_TIMEOUT,
    PodFacts,
    PodRule,
    RoundInput,
    completion_message,
    described,
    drain_bound,
    ignored,
    is_gpu_resource,
    parse_time,
    plan_round,
    rfc3339,
    rule_for,
    rule_matches,
    skips_node,
    uses_gpu,
)
from planning.node.eviction_notice import condition_message, notices
from protocol import errors

T0 = datetime(2025, 3, 1, 10, 0, 0, tzinfo=UTC)


def rule(**fields: Any) -> DrainRule:
    return DrainRule.model_validate(fields)


def pod(name: str = "p", namespace: str = "ml", **fields: Any) -> PodFacts:
    return PodFacts(namespace=namespace, name=name, **fields)


# --- GPU pods -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("containers", "expected"), [
    pytest.param([{"limits": {"nvidia.com/gpu": "1"}}], True, id="limit-only"),
    pytest.param([{"requests": {"amd.com/gpu": "2"}}], True, id="another-vendor"),
    pytest.param([{"requests": {"cpu": "2"}}, {"limits": {"nvidia.com/gpu": "8"}}], True, id="second-container"),
    pytest.param([{"requests": {"nvidia.com/gpu": "0"}}], False, id="zero-gpus"),
    pytest.param([{"requests": {"nvidia.com/gpu-memory": "1"}}], False, id="not-named-gpu"),
    pytest.param([{"requests": {"gpu": "1"}}], False, id="no-domain"),
    pytest.param([{}], False, id="no-resources"),
    pytest.param([], False, id="no-containers"),
])
def test_a_gpu_pod_requests_or_limits_a_domain_gpu_resource(containers: list[dict[str, Any]], expected: bool) -> None:
    assert uses_gpu(containers) is expected


def test_gpu_resource_names() -> None:
    assert is_gpu_resource("nvidia.com/gpu") and is_gpu_resource("amd.com/gpu")
    assert not is_gpu_resource("nvidia.com/mig-1g.5gb") and not is_gpu_resource("/gpu")


# --- which rule -------------------------------------------------------------------------------------------


RULES = [
    rule(namespaces=["kube-system"], action="Leave"),
    rule(gpuPods=True, podSelector={"matchLabels": {"team": "train"}}, action="WaitForCompletion",
         timeoutSeconds=600),
    rule(gpuPods=True, action="Evict"),
    rule(namespaces=["batch"], gpuPods=False, action="Delete"),
]


@pytest.mark.parametrize(("facts", "expected"), [
    pytest.param(pod(namespace="kube-system", gpu=True, labels={"team": "train"}), PodRule(DrainAction.LEAVE, 0),
                 id="first-match-wins"),
    pytest.param(pod(gpu=True, labels={"team": "train"}), PodRule(DrainAction.WAIT_FOR_COMPLETION, 1, 600),
                 id="selector-and-gpu"),
    pytest.param(pod(gpu=True, labels={"team": "infer"}), PodRule(DrainAction.EVICT, 2), id="gpu-only"),
    pytest.param(pod(namespace="batch"), PodRule(DrainAction.DELETE, 3), id="cpu-pod-in-namespace"),
    pytest.param(pod(namespace="batch", gpu=True), PodRule(DrainAction.EVICT, 2), id="gpu-pod-in-namespace"),
    pytest.param(pod(labels={"team": "train"}), PodRule(), id="no-rule-evicts"),
])
def test_the_first_matching_rule_decides(facts: PodFacts, expected: PodRule) -> None:
    assert rule_for(RULES, facts) == expected


def test_a_rule_is_named_by_its_position_from_1_with_its_action() -> None:
    assert PodRule(DrainAction.WAIT_FOR_COMPLETION, 1, 600).describe() == "rule 2 (WaitForCompletion, 600s)"
    assert PodRule(DrainAction.DELETE, 0).describe() == "rule 1 (Delete)"
    assert PodRule().describe() == ""
    assert described(["ml/b", "ml/a"], {"ml/a": PodRule(DrainAction.EVICT, 2)}) == ["ml/a (rule 3 (Evict))", "ml/b"]


# --- the drain's rounds ---------------------------------------------------------------------------------------


def round_of(pods: list[PodFacts], rules: list[DrainRule] = (), now: datetime = T0,  # type: ignore[assignment]
             notice: int = 0, started: datetime = T0) -> Any:
    return plan_round(RoundInput(pods, list(rules), started, now, notice))


def refs(pods: list[PodFacts]) -> list[str]:
    return [p.ref for p in pods]


def test_without_rules_every_pod_is_evicted_as_before() -> None:
    pods = [pod("b"), pod("a", local_data=True), pod("c", terminating=True), pod("ds", daemon_set=True),
            pod("done", phase="Succeeded"), pod("m", mirror=True), pod("s", "noderoll-system", stage_pod=True)]
    plan = round_of(pods)
    assert refs(plan.evict) == ["ml/a", "ml/b"]
    assert refs(plan.remaining) == ["ml/a", "ml/b", "ml/c"] and refs(plan.local) == ["ml/a"]
    assert not plan.delete and not plan.completing and not plan.announce and not plan.done
    assert all(r.describe() == "" for r in plan.rules.values())


def test_each_action_in_one_round() -> None:
    rules = [rule(namespaces=["agents"], action="Leave"), rule(namespaces=["batch"], action="Delete"),
             rule(gpuPods=True, action="WaitForCompletion", timeoutSeconds=60)]
    pods = [pod("agent", "agents"), pod("job", "batch"), pod("trainer", gpu=True), pod("web")]
    plan = round_of(pods, rules, now=T0 + timedelta(seconds=10))
    assert refs(plan.delete) == ["batch/job"] and refs(plan.evict) == ["ml/web"]
    assert [(p.ref, r.describe()) for p, r in plan.completing] == [("ml/trainer", "rule 3 (WaitForCompletion, 60s)")]
    assert "agents/agent" not in refs(plan.remaining)  # Leave: never waited for
    assert completion_message(plan.completing) == (
        "waiting for pod(s) to complete: ml/trainer (rule 3 (WaitForCompletion, 60s))")
    # Its timeout passed: evicted (PDBs respected: the Eviction API).
    later = round_of(pods, rules, now=T0 + timedelta(seconds=60))
    assert refs(later.evict) == ["ml/trainer", "ml/web"] and not later.completing
    # Only Leave pods are left: the drain is done.
    assert round_of([pod("agent", "agents"), pod("ds", daemon_set=True)], rules).done


def test_no_pod_goes_before_its_eviction_at_and_late_pods_get_their_own_notice() -> None:
    ahead = rfc3339(T0 + timedelta(seconds=30))
    plan = round_of([pod("told", eviction_at=ahead), pod("late"), pod("past", eviction_at=rfc3339(T0))], notice=30)
    assert refs(plan.evict) == ["ml/past"] and refs(plan.noticed) == ["ml/late", "ml/told"]
    assert plan.announce == {"ml/late": ahead}
    # Without a notice a pod without the annotation goes at once.
    assert refs(round_of([pod("late")]).evict) == ["ml/late"]


def test_drain_bound_and_skip() -> None:
    rules = [rule(gpuPods=True, action="WaitForCompletion", timeoutSeconds=900),
             rule(namespaces=["a"], action="WaitForCompletion", timeoutSeconds=60), rule(action="Delete")]
    assert drain_bound(600, rules) == 1500 and drain_bound(600, []) == 600 and drain_bound(600, rules, 30) == 1530
    assert skips_node(DrainTimeoutAction.SKIP, errors.DRAIN_TIMEOUT)
    assert skips_node(DrainTimeoutAction.SKIP, errors.PROTECTED_PODS_TIMEOUT)
    assert not skips_node(DrainTimeoutAction.SKIP, errors.DRAIN_BLOCKED)
    assert not skips_node(DrainTimeoutAction.FAIL, errors.DRAIN_TIMEOUT)
    assert SKIPPED_DRAIN_TIMEOUT == "drain-timeout"


def test_times() -> None:
    assert rfc3339(T0 + timedelta(microseconds=1)) == "2025-03-01T10:00:01Z"  # never shorter than asked
    assert parse_time("2025-03-01T10:00:00Z") == T0 and parse_time("garbage") is None
    assert parse_time("2025-03-01T10:00:00") is None  # no zone: not ours


# --- the notice ------------------------------------------------------------------------------------------------


def test_the_notice_tells_every_pod_the_drain_will_evict_or_delete() -> None:
    rules = [rule(namespaces=["agents"], action="Leave"), rule(namespaces=["batch"], action="Delete"),
             rule(gpuPods=True, action="WaitForCompletion", timeoutSeconds=600)]
    pods = [pod("agent", "agents"), pod("job", "batch"), pod("trainer", gpu=True), pod("web"),
            pod("ds", daemon_set=True), pod("done", phase="Failed"), pod("going", terminating=True)]
    assert notices(pods, rules, T0) == {
        "batch/job": "2025-03-01T10:00:00Z", "ml/trainer": "2025-03-01T10:10:00Z", "ml/web": "2025-03-01T10:00:00Z"}
    assert condition_message(T0, 3, "fleet/gpu") == "evicting 3 pod(s) from 2025-03-01T10:00:00Z (node window of fleet/gpu)"


# --- properties -------------------------------------------------------------------------------------------------

names_st = st.sampled_from(["a", "b", "c"])
labels_st = st.dictionaries(st.sampled_from(["team", "tier"]), st.sampled_from(["x", "y"]), max_size=2)
rule_st = st.builds(
    lambda ns, sel, gpu, action: DrainRule.model_validate(
        {k: v for k, v in {"namespaces": ns, "podSelector": sel, "gpuPods": gpu, "action": action.value,
                           "timeoutSeconds": 30 if action is DrainAction.WAIT_FOR_COMPLETION else None}.items()
         if v is not None}),
    st.none() | st.lists(names_st, min_size=1, max_size=2, unique=True),
    st.none() | labels_st.map(lambda labels: {"matchLabels": labels}),
    st.none() | st.booleans(),
    st.sampled_from(list(DrainAction)),
)
pod_st = st.builds(
    PodFacts, namespace=names_st, name=st.sampled_from(["p", "q", "r", "s"]), labels=labels_st, gpu=st.booleans(),
    phase=st.sampled_from(["Running", "Pending", "Succeeded"]), terminating=st.booleans(),
    eviction_at=st.sampled_from(["", rfc3339(T0 - timedelta(seconds=5)), rfc3339(T0 + timedelta(seconds=5))]),
    daemon_set=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(rule_st, max_size=4), pod_st)
def test_the_rule_chosen_is_the_first_that_matches(rules: list[DrainRule], facts: PodFacts) -> None:
    chosen = rule_for(rules, facts)
    if chosen.index is None:
        assert not any(rule_matches(r, facts) for r in rules) and chosen.action is DrainAction.EVICT
    else:
        assert rule_matches(rules[chosen.index], facts)
        assert not any(rule_matches(r, facts) for r in rules[:chosen.index])
        assert chosen.action is rules[chosen.index].action


@settings(max_examples=300, deadline=None)
@given(st.lists(rule_st, max_size=4), st.lists(pod_st, max_size=6, unique_by=lambda p: p.ref),
       st.integers(0, 60), st.sampled_from([0, 30]))
def test_a_round_never_touches_what_it_must_not(rules: list[DrainRule], pods: list[PodFacts], waited: int,
                                               notice: int) -> None:
    now = T0 + timedelta(seconds=waited)
    plan = plan_round(RoundInput(pods, rules, T0, now, notice))
    acted = refs(plan.evict) + refs(plan.delete)
    assert len(acted) == len(set(acted))
    by_ref = {p.ref: p for p in pods}
    for ref in acted:
        facts = by_ref[ref]
        decided = rule_for(rules, facts)
        # Never a Leave pod, an ignored one, one already going, nor one before its notice's time.
        assert decided.action is not DrainAction.LEAVE and not ignored(facts) and not facts.terminating
        at = parse_time(facts.eviction_at)
        assert at is not None and at <= now if (facts.eviction_at or notice) else True
        assert (ref in refs(plan.delete)) == (decided.action is DrainAction.DELETE)
        if decided.action is DrainAction.WAIT_FOR_COMPLETION:
            assert waited >= (decided.timeout_seconds or 0)
    # The drain waits exactly for the pods it may evict or delete; done iff none is left.
    expected = sorted(p.ref for p in pods if not ignored(p) and rule_for(rules, p).action is not DrainAction.LEAVE)
    assert refs(plan.remaining) == expected and plan.done == (not expected)
    assert set(plan.announce) <= {p.ref for p in plan.noticed}
