"""crd_bridge.node_views: the bridge's per-Node view follows the Node watch (issue 26 item 4), so
the status poller converts no Node on a poll."""

from __future__ import annotations

import json
from typing import Any

from crd_bridge.cache import ObjectCache
from crd_bridge.node_changes import node_view
from crd_bridge.watcher import SYNC, WatchEvent


def a_node(name: str, pool: str = "gpu", draining: bool = False, version: str = "1") -> dict[str, Any]:
    conditions = [{"type": "noderoll.io/Draining", "status": "True", "reason": "EvictionRefused",
                   "message": "pdb", "lastTransitionTime": "2026-12-01T00:00:00Z"}] if draining else []
    return {"metadata": {"name": name, "resourceVersion": version, "labels": {"pool": pool},
                         "annotations": {"noderoll.io/state": json.dumps({"packages": {}})}},
            "spec": {}, "status": {"conditions": conditions}}


def test_views_follow_the_watch_and_equal_a_fresh_conversion() -> None:
    cache = ObjectCache()
    cache.apply(WatchEvent("Node", SYNC, objects=[a_node("a"), a_node("b", draining=True)]))
    cache.apply(WatchEvent("Node", "MODIFIED", a_node("a", pool="cpu", version="2")))
    cache.apply(WatchEvent("Node", "ADDED", a_node("c")))
    cache.apply(WatchEvent("Node", "MODIFIED", a_node("b", version="3")))  # its drain no longer blocked
    cache.apply(WatchEvent("Node", "DELETED", a_node("c")))
    cache.apply(WatchEvent("Package", "ADDED", {"metadata": {"name": "p"}}))
    assert cache.nodes.views == {name: node_view(obj) for name, obj in cache.of("Node").items()}
    assert cache.nodes.views["a"].labels == {"pool": "cpu"} and set(cache.nodes.views) == {"a", "b"}
    assert cache.nodes.draining == {}
    cache.apply(WatchEvent("Node", "MODIFIED", a_node("a", draining=True, version="4")))
    assert list(cache.nodes.draining) == ["a"]
    # One conversion per Node event, none for other kinds.
    assert cache.nodes.conversions == 6


def test_a_poll_reads_the_views_and_converts_nothing() -> None:
    from crd_bridge.status_poller import StatusPoller

    cache = ObjectCache()
    cache.apply(WatchEvent("Node", SYNC, objects=[a_node(f"n{i}") for i in range(50)]))

    class Check:
        package = type("P", (), {"spec": type("S", (), {"node_selector": None})()})()

    class Reconciler:
        valid = {"p": Check()}

    Reconciler.cache = cache  # type: ignore[attr-defined]
    before = cache.nodes.conversions

    class Untouchable(dict):  # type: ignore[type-arg]
        def values(self) -> Any:
            raise AssertionError("the poll read the raw Node objects")

    cache.objects["Node"] = Untouchable(cache.objects["Node"])
    import crd_bridge.status_poller as poller

    seen: list[list[Any]] = []
    original = poller.set_package_nodes
    poller.set_package_nodes = lambda name, counts: seen.append([name, counts])  # type: ignore[assignment]
    try:
        StatusPoller(Reconciler(), lambda _: None)._publish_nodes("p")  # type: ignore[arg-type]
    finally:
        poller.set_package_nodes = original  # type: ignore[assignment]
    assert cache.nodes.conversions == before and seen and seen[0][0] == "p"


def test_package_node_counts_follow_the_watch_and_equal_a_fresh_count() -> None:
    """Per Package, its target nodes per (state, stage), kept by the Node events (issue 45): the same as counting
    every node's annotation afresh, after adds, changes, deletions and a change of the Package's selector."""
    from api.package import PackageSpec
    from crd_bridge.progress_metrics import node_counts
    from planning.node.targets import is_candidate

    def recorded(state: str, stage: str = "apply") -> str:
        return json.dumps({"packages": {"p": {"version": "1.0.0", "stage": stage, "state": state}}})

    def node(name: str, pool: str, annotation: str | None, version: str) -> dict[str, Any]:
        obj = a_node(name, pool, version=version)
        obj["metadata"]["annotations"] = {"noderoll.io/state": annotation} if annotation is not None else {}
        return obj

    gpu = PackageSpec.model_validate({"version": "1.0.0", "image": "reg.example/p:1.0.0", "nodeSelector": {"matchLabels": {"pool": "gpu"}}})
    every = PackageSpec.model_validate({"version": "1.0.0", "image": "reg.example/p:1.0.0"})
    cache = ObjectCache()
    cache.apply(WatchEvent("Node", SYNC, objects=[node("a", "gpu", None, "1"), node("b", "gpu", "{bad", "1"),
                                                  node("c", "cpu", recorded("complete", "config"), "1")]))

    def fresh(spec: PackageSpec) -> list[Any]:
        return node_counts("p", [v.state_annotation or None for v in cache.nodes.views.values()
                                 if is_candidate(spec, v.labels)])

    assert cache.nodes.package_counts("p", gpu) == fresh(gpu)
    cache.apply(WatchEvent("Node", "MODIFIED", node("a", "gpu", recorded("in_progress"), "2")))
    cache.apply(WatchEvent("Node", "ADDED", node("d", "gpu", recorded("complete", "config"), "1")))
    cache.apply(WatchEvent("Node", "MODIFIED", node("c", "gpu", recorded("complete", "config"), "2")))  # joins
    cache.apply(WatchEvent("Node", "DELETED", node("b", "gpu", "{bad", "1")))
    assert cache.nodes.package_counts("p", gpu) == fresh(gpu)
    assert [(c.state, c.stage, c.count) for c in fresh(gpu)] == [("complete", "config", 2), ("in_progress", "apply", 1)]
    assert cache.nodes.package_counts("p", every) == fresh(every)  # a new selector: counted afresh


def test_the_cache_keeps_no_managed_fields_images_or_volumes() -> None:
    """`crd_bridge.watcher.slim`: what the bridge never reads is dropped before an object is cached (issue 45:
    half of a simulated Node's JSON); what it reads stays."""
    from crd_bridge.watcher import slim

    node = {"metadata": {"name": "n1", "labels": {"gpu": "a100"}, "annotations": {"noderoll.io/state": "{}"},
                         "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "8"},
                       "nodeInfo": {"bootID": "b"}, "images": [{"names": ["x"], "sizeBytes": 1}],
                       "volumesInUse": ["v"], "volumesAttached": [{"name": "v", "devicePath": "/d"}]}}
    kept = slim(node)
    assert "managedFields" not in kept["metadata"] and not {"images", "volumesInUse", "volumesAttached"} & kept["status"].keys()
    assert kept["metadata"]["labels"] == {"gpu": "a100"} and kept["spec"]["taints"] and kept["status"]["nodeInfo"]
    assert kept["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert slim({"metadata": {"name": "p"}, "spec": {}}) == {"metadata": {"name": "p"}, "spec": {}}  # a Package
