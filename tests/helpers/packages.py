"""The packages tests roll out: their images, where fleetsim finds them, and one builder of Package specs.

fleetsim resolves an image by its name and tag only (fleetsim/images.py), so the registry part says
which store a test means:

* `example.local/<name>:1.0.0`: the examples, deploy/examples/packages/<name> (always in the store);
* `bench.local/bench-sleep:1.0.0`: bench/packages/bench-sleep, whose every stage sleeps
  BENCH_STAGE_SECONDS (a fleet needs `image_stores=[BENCH_PACKAGES]`);
* `bad.local/<variant>:1.0.0`: the broken copies of bench-sleep that tests/badinput builds.

    spec = package_spec(SLEEP_IMAGE, policy=policy, labels={"fleet-test": label}, stage_seconds=2,
                        interrupt={"type": "reboot"})
    create_package(api, run.package(name, spec))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import keys
from bench import scenario

# bench-sleep's stage length (bench/packages/bench-sleep/stage.sh).
STAGE_SECONDS_ENV = "BENCH_STAGE_SECONDS"
# The container image of workload pods on fleetsim or fake nodes: no kubelet ever pulls it.
WORKLOAD_IMAGE = "example.local/workload:1"


def example_image(name: str, version: str = "1.0.0") -> str:
    """`example.local/<name>:<version>`: the example package `name`, or the package `name` of a test's own
    image store, or any name for a Package no node ever runs."""
    return f"example.local/{name}:{version}"


def broken_image(variant: str) -> str:
    """`bad.local/<variant>:1.0.0`: one of tests/badinput's broken bench-sleep variants (a folder of its store)."""
    return f"bad.local/{variant}:1.0.0"


SYSCTL_IMAGE = example_image("sysctl-tuning")
SCRIPT_IMAGE = example_image("script-config")
KMOD_IMAGE = example_image("kmod-blocklist")
SERVICE_IMAGE = example_image("service-restart")
NODEWRIGHT_IMAGE = example_image("nodewright-tuning")
SLEEP_IMAGE = scenario.IMAGE
BENCH_PACKAGES = scenario.PACKAGES_DIR


def package_spec(
    image: str = SYSCTL_IMAGE,
    *,
    policy: str | None = None,
    labels: Mapping[str, str] | None = None,
    stage_seconds: float | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A Package spec by alias (the CRD's field names), as a test applies it.

    `version` is the image's tag unless `fields` names one; `policy` becomes `deploymentPolicy`,
    `labels` the `nodeSelector.matchLabels`; `stage_seconds` (bench-sleep and its variants) comes
    first in `env`, before any `env` entries in `fields`; the other `fields` are copied as they are.
    """
    spec: dict[str, Any] = {"version": image.rsplit(":", 1)[1], "image": image}
    if policy is not None:
        spec["deploymentPolicy"] = policy
    if labels is not None:
        spec["nodeSelector"] = {"matchLabels": dict(labels)}
    env = list(fields.pop("env", []))
    if stage_seconds is not None:
        env.insert(0, {"name": STAGE_SECONDS_ENV, "value": f"{stage_seconds:g}"})
    if env:
        spec["env"] = env
    return {**spec, **fields}


def package_object(name: str, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None,
                   annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Package object named `name` with `spec` (and the metadata `labels`/`annotations` when given)."""
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": keys.API_VERSION, "kind": keys.PACKAGE_KIND, "metadata": meta, "spec": dict(spec)}
