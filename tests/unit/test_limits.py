"""Per-Package limits (issue #16 item 4): the model's ranges, the window's combination rule, and the
worker's defaults from its environment."""

from __future__ import annotations

import pytest

from api.package import PackageSpec
from api.validation import validate_documents
from planning.node.window import TimeLimits, package_limits, window_limits
from protocol.node import node_workflow_input
from protocol.node_settings import INTERRUPT_TIMEOUT_ENV, PROTECTED_PODS_TIMEOUT_ENV, STAGE_TIMEOUT_ENV
from tests.helpers.packages import example_image

DEFAULTS = TimeLimits(protected_pods=3600, stage=1800, interrupt=900)


def spec(**limits: int) -> PackageSpec:
    return PackageSpec.model_validate({"version": "1.0.0", "image": example_image("x"), "limits": limits})


def test_unset_fields_are_the_defaults_and_set_ones_win() -> None:
    assert package_limits(spec(), DEFAULTS) == DEFAULTS
    assert package_limits(spec(stageTimeoutSeconds=120), DEFAULTS) == TimeLimits(3600, 120, 900)


def test_a_window_takes_the_largest_of_its_packages() -> None:
    lowered = spec(protectedPodsTimeoutSeconds=60, stageTimeoutSeconds=60, interruptTimeoutSeconds=60)
    raised = spec(protectedPodsTimeoutSeconds=3 * 86400)
    assert window_limits([lowered], DEFAULTS) == TimeLimits(60, 60, 60)
    # A package without a value counts with the default: lowering needs every package to agree.
    assert window_limits([lowered, spec()], DEFAULTS) == DEFAULTS
    assert window_limits([lowered, raised], DEFAULTS) == TimeLimits(3 * 86400, 1800, 900)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("protectedPodsTimeoutSeconds", 59, "greater than or equal to 60"),
    ("protectedPodsTimeoutSeconds", 30 * 86400 + 1, "less than or equal to 2592000"),
    ("stageTimeoutSeconds", 86401, "less than or equal to 86400"),
    ("interruptTimeoutSeconds", 0, "greater than or equal to 60"),
    ("rebootTimeoutSeconds", 900, "unknown field(s) rebootTimeoutSeconds; valid fields are: interruptTimeoutSeconds"),
])
def test_ranges_are_refused_with_the_field(field: str, value: int, message: str) -> None:
    doc = {"apiVersion": "noderoll.io/v1alpha1", "kind": "Package", "metadata": {"name": "limits"},
           "spec": {"version": "1.0.0", "image": example_image("x"), "limits": {field: value}}}
    problems = [f"{p.field}: {p.message}" for p in validate_documents([doc]).problems]
    assert len(problems) == 1 and problems[0].startswith("spec.limits") and message in problems[0], problems


def test_worker_environment_sets_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (node_workflow_input("n").protected_pods_timeout_seconds, node_workflow_input("n").stage_timeout_seconds,
            node_workflow_input("n").reboot_timeout_seconds) == (3600, 1800, 900)
    monkeypatch.setenv(PROTECTED_PODS_TIMEOUT_ENV, "5")
    monkeypatch.setenv(STAGE_TIMEOUT_ENV, "70")
    monkeypatch.setenv(INTERRUPT_TIMEOUT_ENV, "80")
    settings = node_workflow_input("n")
    assert (settings.protected_pods_timeout_seconds, settings.stage_timeout_seconds,
            settings.reboot_timeout_seconds) == (5, 70, 80)
