"""A Package is judged Invalid only for an object the apiserver lacks, never for one its watch lags behind.

The demo once failed with "sysctl-tuning Invalid: spec.deploymentPolicy: no DeploymentPolicy
'gpu-fleet'": the policy, applied just before its Packages, reached the bridge's cache after them
(one watch per kind). Here the real `Reconciler` runs in-process against the real apiserver with a
cache filled the way a lagging watch leaves it, so the order is certain rather than a race: the
verdict waits while the cache lags, and comes as soon as the watch delivers (or when the object is
really missing, or outside the bridge's label selector, which its watch never delivers).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

import kube
from api import keys
from crd_bridge.cache import ObjectCache
from crd_bridge.fleet_client import Fleets
from crd_bridge.reconciler import Reconciler
from crd_bridge.watcher import SYNC, WatchEvent, read_as_watched
from localstack.state import StackInfo
from tests.helpers import unique_name
from tests.helpers.packages import package_object, package_spec
from tests.helpers.processes import TEST_LABEL
from tests.integration.bridge_support import (
    create_package,
    custom,
    delete_package,
    delete_policy,
    read_package,
    read_policy,
    reasons,
)

pytestmark = pytest.mark.integration
POLICY_SPEC = {"default": {"budget": {"count": 1}}}


class Shard:
    """Objects labelled for this test only: no bridge of another test watches them."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.label = unique_name("lag")
        self.packages: list[str] = []
        self.policies: list[str] = []

    @property
    def selector(self) -> str:
        return f"{TEST_LABEL}={self.label}"

    def policy(self, name: str, *, labelled: bool = True) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if labelled:
            meta["labels"] = {TEST_LABEL: self.label}
        body = {"apiVersion": keys.API_VERSION, "kind": keys.POLICY_KIND, "metadata": meta, "spec": POLICY_SPEC}
        custom(self.api).create_cluster_custom_object(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL, body)
        self.policies.append(name)
        return read_policy(self.api, name)

    def package(self, name: str, **fields: Any) -> dict[str, Any]:
        create_package(self.api, package_object(name, package_spec(**fields), {TEST_LABEL: self.label}))
        self.packages.append(name)
        return read_package(self.api, name)

    def cleanup(self) -> None:
        for name in self.packages:
            delete_package(self.api, name)
        for name in self.policies:
            delete_policy(self.api, name)


@pytest.fixture
def shard(local_stack: StackInfo, kube_api_client: ApiClient) -> Iterator[Shard]:
    kube.configure(local_stack.kubeconfig)
    made = Shard(kube_api_client)
    yield made
    made.cleanup()


def reconciler_with(shard: Shard, temporal: Client, packages: list[dict[str, Any]],
                    policies: list[dict[str, Any]]) -> tuple[Reconciler, ObjectCache]:
    """A Reconciler whose cache holds just these objects, as a watch that delivered nothing else does."""
    cache = ObjectCache()
    cache.apply(WatchEvent(keys.PACKAGE_KIND, SYNC, objects=packages))
    cache.apply(WatchEvent(keys.POLICY_KIND, SYNC, objects=policies))
    live = functools.partial(read_as_watched, label_selector=shard.selector)
    return Reconciler(cache, Fleets(temporal, task_queue=unique_name("unused")), live), cache


def phase(shard: Shard, name: str) -> str | None:
    return (read_package(shard.api, name).get("status") or {}).get("phase")


async def test_a_policy_its_watch_has_not_delivered_does_not_make_the_package_invalid(
    shard: Shard, temporal_client: Client
) -> None:
    policy = shard.policy(unique_name("pol"))
    name = policy["metadata"]["name"]
    package = shard.package(unique_name("pkg"), policy=name)
    reconciler, cache = reconciler_with(shard, temporal_client, [package], [])

    # The policy exists in the apiserver but not yet in the cache: no verdict, no fleet touched.
    assert await reconciler.reconcile_package(package["metadata"]["name"]) == set()
    assert phase(shard, package["metadata"]["name"]) != "Invalid"
    assert "InvalidSpec" not in reasons(shard.api, package["metadata"]["name"])

    # The watch delivers the policy: the Package is valid and handed to its fleet.
    cache.apply(WatchEvent(keys.POLICY_KIND, "ADDED", obj=policy))
    assert await reconciler.reconcile_policy(name) == [package["metadata"]["name"]]
    assert await reconciler.reconcile_package(package["metadata"]["name"]) == {name}
    assert package["metadata"]["name"] in reconciler.valid
    assert phase(shard, package["metadata"]["name"]) != "Invalid"


async def test_a_dependency_at_a_version_its_watch_has_not_delivered_waits_too(
    shard: Shard, temporal_client: Client
) -> None:
    base_name = unique_name("base")
    old = shard.package(base_name, version="1.0.0")
    # The dependency moves to 2.0.0 and a dependent wanting it is applied; the cache still has 1.0.0.
    custom(shard.api).patch_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, base_name,
                                                  {"spec": {"version": "2.0.0"}})
    dependent = shard.package(unique_name("dep"), dependsOn={base_name: "2.0.0"})
    reconciler, cache = reconciler_with(shard, temporal_client, [old, dependent], [])

    assert await reconciler.reconcile_package(dependent["metadata"]["name"]) == set()
    assert phase(shard, dependent["metadata"]["name"]) != "Invalid"

    cache.apply(WatchEvent(keys.PACKAGE_KIND, "MODIFIED", obj=read_package(shard.api, base_name)))
    await reconciler.reconcile_package(dependent["metadata"]["name"])
    assert dependent["metadata"]["name"] in reconciler.valid


@pytest.mark.parametrize("why", ["missing", "outside the label selector"])
async def test_a_policy_the_watch_never_delivers_makes_the_package_invalid(
    shard: Shard, temporal_client: Client, why: str
) -> None:
    name = unique_name("pol")
    if why != "missing":
        shard.policy(name, labelled=False)  # exists, but this bridge's watch does not select it
    package = shard.package(unique_name("pkg"), policy=name)
    reconciler, _cache = reconciler_with(shard, temporal_client, [package], [])

    await reconciler.reconcile_package(package["metadata"]["name"])
    status = read_package(shard.api, package["metadata"]["name"]).get("status") or {}
    assert status.get("phase") == "Invalid", status
    assert f"no DeploymentPolicy '{name}'" in str(status), status
