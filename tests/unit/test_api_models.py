"""Package, DeploymentPolicy and selector models: every semantic rule (api/package.py, api/policy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from api.enums import InterruptType, Promotion, StrategyType
from api.names import MAX_NAME_LENGTH, is_valid_name
from api.package import Package, PackageSpec
from api.policy import DeploymentPolicy, DeploymentPolicySpec
from api.problems import InvalidDocumentError, ValidationProblem
from api.selectors import LabelSelector
from tests.helpers.packages import example_image


def package(spec: dict[str, Any], name: str = "pkg") -> dict[str, Any]:
    base = {"version": "1.0.0", "image": example_image("pkg")}
    return {
        "apiVersion": "noderoll.io/v1alpha1",
        "kind": "Package",
        "metadata": {"name": name},
        "spec": base | spec,
    }


def policy(spec: dict[str, Any], name: str = "pol") -> dict[str, Any]:
    base = {"default": {"budget": {"count": 1}}}
    return {
        "apiVersion": "noderoll.io/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": base | spec,
    }


def problems_of(fn: Any, obj: dict[str, Any]) -> list[ValidationProblem]:
    with pytest.raises(InvalidDocumentError) as err:
        fn(obj)
    return err.value.problems


def test_minimal_package_gets_defaults() -> None:
    pkg = Package.from_k8s(package({}))
    assert pkg.spec.drain.timeout_seconds == 600
    assert pkg.spec.uninstall.enabled is False
    assert pkg.spec.node_selector is None
    assert pkg.spec.dump()["drain"] == {"timeoutSeconds": 600, "deleteEmptyDirData": False}


def test_snake_case_is_accepted_too() -> None:
    spec = PackageSpec(version="1.2", image="x/y:1", runtime_required=True)
    assert spec.dump()["runtimeRequired"] is True


@pytest.mark.parametrize("name", ["a", "sysctl-tuning", "a" * MAX_NAME_LENGTH, "0abc"])
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)


@pytest.mark.parametrize("name", ["", "A", "a_b", "-a", "a-", "a" * (MAX_NAME_LENGTH + 1), "a.b"])
def test_invalid_names_are_refused_with_the_rule(name: str) -> None:
    problems = problems_of(Package.from_k8s, package({}, name=name))
    assert problems[0].field == "metadata.name"
    assert "lowercase DNS label of at most 43 characters" in problems[0].message


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"version": "1.x"}, "spec.version", "semantic version such as 1.2.3"),
        ({"image": "has space"}, "spec.image", "not an image reference"),
        ({"intterupt": {"type": "reboot"}}, "spec", "unknown field(s) intterupt; valid fields are:"),
        (
            {"interrupt": {"type": "bounce"}},
            "spec.interrupt.type",
            "'noop', 'service', 'restartAllServices' or 'reboot'",
        ),
        (
            {"interrupt": {"type": "service"}},
            "spec.interrupt",
            "type service needs a non-empty services list",
        ),
        (
            {"interrupt": {"type": "reboot", "services": ["x"]}},
            "spec.interrupt",
            "services is only used with type service",
        ),
        ({"dependsOn": {"other": ""}}, "spec.dependsOn", "empty version"),
        ({"dependsOn": {"other": "one"}}, "spec.dependsOn", "semantic version"),
        ({"dependsOn": {"Bad": "1.0"}}, "spec.dependsOn", "lowercase DNS label"),
        ({"config": {"a b": "x"}}, "spec.config", "config key 'a b' is invalid"),
        (
            {"config": {"a.conf": "x"}, "configInterrupts": {"*.env": {"type": "reboot"}}},
            "spec",
            "matches no config key; config keys are: a.conf",
        ),
        ({"configInterrupts": {"x": {"type": "reboot"}}}, "spec", "config keys are: none"),
        ({"uninstall": {"apply": True}}, "spec.uninstall", "apply: true needs enabled: true"),
        ({"env": [{"name": "A"}, {"name": "A"}]}, "spec.env", "'A' is set twice"),
        ({"env": [{"name": "A", "valueFrom": {}}]}, "spec.env[0]", "valid fields are: name, value"),
        ({"env": [{"name": "1A"}]}, "spec.env[0].name", "not a valid variable name"),
        (
            {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}}},
            "spec.resources",
            "a limit must be at least the request",
        ),
        ({"resources": {"requests": {"memory": "lots"}}}, "spec.resources.requests", "Kubernetes quantity"),
        ({"deploymentPolicy": "Bad"}, "spec.deploymentPolicy", "lowercase DNS label"),
        ({"drain": {"timeoutSeconds": 0}}, "spec.drain.timeoutSeconds", "greater than or equal to 1"),
        (
            {"additionalTolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
            "spec.additionalTolerations[0]",
            "operator Exists takes no value",
        ),
        (
            {"additionalTolerations": [{"key": "k", "effect": "Sometimes"}]},
            "spec.additionalTolerations[0]",
            "use NoSchedule, PreferNoSchedule or NoExecute",
        ),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            "spec.nodeSelector.matchExpressions[0]",
            "needs a non-empty values list",
        ),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
            "spec.nodeSelector.matchExpressions[0]",
            "takes no values",
        ),
        (
            {"nodeSelector": {"matchLabels": {"bad key!": "x"}}},
            "spec.nodeSelector.matchLabels",
            "not a valid label key",
        ),
    ],
)
def test_package_rules(spec: dict[str, Any], field: str, message: str) -> None:
    problems = problems_of(Package.from_k8s, package(spec))
    assert any(p.field == field and message in p.message for p in problems), problems


def test_package_cannot_depend_on_itself() -> None:
    problems = problems_of(Package.from_k8s, package({"dependsOn": {"pkg": "1.0.0"}}))
    assert problems == [
        ValidationProblem("Package", "pkg", "spec.dependsOn.pkg", "a package cannot depend on itself")
    ]


def test_config_interrupt_globs_match() -> None:
    pkg = Package.from_k8s(
        package(
            {
                "config": {"a.env": "1"},
                "configInterrupts": {
                    "*.env": {"type": "service", "services": ["x"]},
                    "a.e?v": {"type": "noop"},
                },
            }
        )
    )
    assert set(pkg.spec.config_interrupts) == {"*.env", "a.e?v"}


def test_pause_by_annotation_or_spec() -> None:
    assert Package.from_k8s(package({"paused": True})).paused
    obj = package({})
    obj["metadata"]["annotations"] = {"noderoll.io/pause": "true"}
    assert Package.from_k8s(obj).paused
    obj["metadata"]["annotations"] = {"noderoll.io/pause": "yes"}
    assert not Package.from_k8s(obj).paused


def test_problem_renders_as_cli_line() -> None:
    assert str(ValidationProblem("Package", "a", "spec.version", "bad")) == "Package/a: spec.version: bad"


def test_policy_defaults() -> None:
    pol = DeploymentPolicy.from_k8s(policy({"canary": {}}))
    strategy = pol.spec.default.strategy
    assert (strategy.type, strategy.initial_batch, strategy.batch_threshold, strategy.safety_limit) == (
        StrategyType.FIXED,
        1,
        100,
        50,
    )
    assert strategy.failure_threshold is None
    assert pol.spec.canary is not None and pol.spec.canary.promotion is Promotion.AUTO


def test_compartment_strategy_falls_back_to_default() -> None:
    spec = DeploymentPolicySpec.model_validate(
        {
            "default": {"budget": {"count": 2}, "strategy": {"type": "linear"}},
            "compartments": [
                {"name": "a", "selector": {"matchLabels": {"a": "1"}}, "budget": {"count": 1}},
                {
                    "name": "b",
                    "selector": {"matchLabels": {"b": "1"}},
                    "budget": {"count": 1},
                    "strategy": {"type": "exponential"},
                },
            ],
        }
    )
    assert spec.strategy_of("a").type is StrategyType.LINEAR
    assert spec.strategy_of("b").type is StrategyType.EXPONENTIAL
    assert spec.strategy_of("default").type is StrategyType.LINEAR
    assert spec.strategy_of("b").effective_growth_factor == 2


def compartment(name: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "selector": {"matchLabels": labels or {"pool": name}},
        "budget": {"count": 1},
    } | extra


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"default": {"budget": {"count": 1, "percent": 10}}},
            "spec.default.budget",
            "set exactly one of count",
        ),
        ({"default": {"budget": {}}}, "spec.default.budget", "set exactly one of count"),
        (
            {"default": {"budget": {"percent": 0}}},
            "spec.default.budget.percent",
            "greater than or equal to 1",
        ),
        (
            {"default": {"budget": {"percent": 101}}},
            "spec.default.budget.percent",
            "less than or equal to 100",
        ),
        (
            {"default": {"budget": {"count": 1}, "strategy": {"type": "fixed", "delta": 1}}},
            "spec.default.strategy",
            "delta is only used by type linear",
        ),
        (
            {"default": {"budget": {"count": 1}, "strategy": {"type": "linear", "growthFactor": 3}}},
            "spec.default.strategy",
            "growthFactor is only used by type exponential",
        ),
        (
            {"default": {"budget": {"count": 1}, "strategy": {"type": "exponential", "growthFactor": 1}}},
            "spec.default.strategy.growthFactor",
            "greater than or equal to 2",
        ),
        (
            {"default": {"budget": {"count": 1}, "strategy": {"type": "random"}}},
            "spec.default.strategy.type",
            "'fixed', 'linear', 'exponential' or 'rolling'",
        ),
        (
            {"default": {"budget": {"count": 1}, "strategy": {"batchThreshold": 0}}},
            "spec.default.strategy.batchThreshold",
            "greater than or equal to 1",
        ),
        (
            {"compartments": [compartment("a"), compartment("a", {"x": "y"})]},
            "spec",
            "compartments[1].name 'a' is used twice",
        ),
        (
            {"compartments": [compartment("a"), compartment("b", {"pool": "a"})]},
            "spec",
            "has the same selector as a",
        ),
        ({"compartments": [compartment("default")]}, "spec.compartments[0].name", "'default' is reserved"),
        (
            {"compartments": [{"name": "a", "budget": {"count": 1}}]},
            "spec.compartments[0].selector",
            "required field is missing",
        ),
        ({"canary": {"count": 3}}, "spec", "canary.count 3 is more than the budgets allow at once (1)"),
        ({"canary": {"promotion": "later"}}, "spec.canary.promotion", "'auto' or 'manual'"),
        ({"default": None}, "spec.default", "valid dictionary"),
    ],
)
def test_policy_rules(spec: dict[str, Any], field: str, message: str) -> None:
    problems = problems_of(DeploymentPolicy.from_k8s, policy(spec))
    assert any(p.field == field and message in p.message for p in problems), problems


def test_canary_with_percent_budget_is_checked_by_the_planner_not_the_model() -> None:
    pol = DeploymentPolicy.from_k8s(policy({"default": {"budget": {"percent": 10}}, "canary": {"count": 50}}))
    assert pol.spec.canary is not None and pol.spec.canary.count == 50


def test_canary_fits_sum_of_count_budgets() -> None:
    spec = {"compartments": [compartment("a") | {"budget": {"count": 2}}], "canary": {"count": 3}}
    assert DeploymentPolicy.from_k8s(policy(spec)).spec.canary is not None


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
        ),
    ],
)
def test_label_selector_matches(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is expected


def test_interrupt_type_enum_values() -> None:
    assert [t.value for t in InterruptType] == ["noop", "service", "restartAllServices", "reboot"]


def test_a_rolling_policy_rolls_everywhere_and_takes_no_initial_batch() -> None:
    from api.policy import DeploymentPolicySpec

    rolling = DeploymentPolicySpec.model_validate({"default": {"budget": {"percent": 25}, "strategy": {
        "type": "rolling", "failureThreshold": 3, "initialBatch": 1}}})  # 1: the CRD's default, filled in
    assert rolling.default.strategy.type.value == "rolling"
    with pytest.raises(ValueError, match="initialBatch is not used by type rolling"):
        DeploymentPolicySpec.model_validate({"default": {"budget": {"count": 2}, "strategy": {
            "type": "rolling", "initialBatch": 4}}})
    with pytest.raises(ValueError, match="a policy rolls in every compartment or in none"):
        DeploymentPolicySpec.model_validate({
            "default": {"budget": {"count": 2}, "strategy": {"type": "rolling"}},
            "compartments": [{"name": "gpu", "selector": {"matchLabels": {"gpu": "true"}}, "budget": {"count": 1},
                              "strategy": {"type": "fixed"}}]})
