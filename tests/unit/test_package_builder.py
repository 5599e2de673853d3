"""The tests' Package-spec builder (tests/helpers/packages.py) writes what the CRD model reads."""

from __future__ import annotations

from api.package import PackageSpec
from tests.helpers.packages import SLEEP_IMAGE, SYSCTL_IMAGE, example_image, package_object, package_spec


def test_the_defaults_are_sysctl_tuning_at_its_tag() -> None:
    assert package_spec() == {"version": "1.0.0", "image": SYSCTL_IMAGE}
    assert package_spec(example_image("x", "1.2")) == {"version": "1.2", "image": "example.local/x:1.2"}


def test_policy_labels_and_stage_seconds_by_alias() -> None:
    spec = package_spec(SLEEP_IMAGE, policy="gpu", labels={"fleet": "a"}, stage_seconds=2,
                        env=[{"name": "BENCH_STAGE_EXIT", "value": "3"}], interrupt={"type": "reboot"})
    assert spec == {
        "version": "1.0.0", "image": SLEEP_IMAGE, "deploymentPolicy": "gpu",
        "nodeSelector": {"matchLabels": {"fleet": "a"}},
        "env": [{"name": "BENCH_STAGE_SECONDS", "value": "2"}, {"name": "BENCH_STAGE_EXIT", "value": "3"}],
        "interrupt": {"type": "reboot"},
    }
    parsed = PackageSpec.model_validate(spec)
    assert parsed.deployment_policy == "gpu" and parsed.node_selector.match_labels == {"fleet": "a"}
    assert [(e.name, e.value) for e in parsed.env] == [("BENCH_STAGE_SECONDS", "2"), ("BENCH_STAGE_EXIT", "3")]


def test_fields_override_and_fractions_keep_their_digits() -> None:
    spec = package_spec(SLEEP_IMAGE, stage_seconds=0.5, version="2.0.0", nodeSelector={"matchLabels": {}})
    assert spec["version"] == "2.0.0" and spec["nodeSelector"] == {"matchLabels": {}}
    assert spec["env"] == [{"name": "BENCH_STAGE_SECONDS", "value": "0.5"}]
    assert "env" not in package_spec() and "deploymentPolicy" not in package_spec(policy=None)


def test_package_object_carries_labels_and_annotations_only_when_given() -> None:
    assert package_object("a", {"version": "1.0.0"})["metadata"] == {"name": "a"}
    obj = package_object("a", package_spec(), {"t": "1"}, {"noderoll.io/pause": "true"})
    assert obj["kind"] == "Package" and obj["metadata"] == {
        "name": "a", "labels": {"t": "1"}, "annotations": {"noderoll.io/pause": "true"}}
