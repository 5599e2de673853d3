"""Cluster identity (issue 29, ADR 0017): ids, task queues, names, worker identities, the start-up guard. Pure."""

from __future__ import annotations

import argparse

import pytest

from protocol import names
from protocol.version import identity_fields, identity_version, worker_identity
from service.cluster_guard import Identity, conflicts, refusal
from service.connection import add_connection_arguments, settings_from_args


def test_without_a_cluster_the_ids_are_the_single_cluster_ones() -> None:
    assert names.fleet_workflow_id("gpu") == "fleet/gpu"
    assert names.fleet_workflow_id(None) == "fleet/default"
    assert names.node_workflow_id("gpu-node-1") == "node/gpu-node-1"
    assert names.cluster_task_queue("") == "noderoll"


def test_with_a_cluster_the_ids_and_task_queue_carry_it() -> None:
    assert names.fleet_workflow_id("gpu", "eu-1") == "fleet/eu-1/gpu"
    assert names.fleet_workflow_id(None, "eu-1") == "fleet/eu-1/default"
    assert names.node_workflow_id("gpu-node-1", "eu-1") == "node/eu-1/gpu-node-1"
    assert names.cluster_task_queue("eu-1") == "noderoll-eu-1"
    assert names.global_workflow_id("gpu") == "global/gpu"


@pytest.mark.parametrize(("workflow_id", "cluster"), [
    pytest.param("fleet/gpu", "", id="fleet"),
    pytest.param("node/gpu-node-1", "", id="node"),
    pytest.param("fleet/eu-1/gpu", "eu-1", id="clustered-fleet"),
    pytest.param("node/eu-1/gpu-node-1", "eu-1", id="clustered-node"),
    pytest.param("global/gpu", None, id="global"),
    pytest.param("package/old", None, id="legacy"),
])
def test_id_cluster(workflow_id: str, cluster: str | None) -> None:
    assert names.id_cluster(workflow_id) == cluster


@pytest.mark.parametrize(("name", "problem"), [
    pytest.param("eu-1", "", id="ok"),
    pytest.param("", "empty", id="empty"),
    pytest.param("EU", "invalid", id="upper"),
    pytest.param("eu/1", "invalid", id="slash"),
    pytest.param("-eu", "invalid", id="leading-dash"),
    pytest.param("a" * 41, "invalid", id="too-long"),
    pytest.param("global", "reserved", id="global"),
])
def test_cluster_names(name: str, problem: str) -> None:
    found = names.cluster_name_problem(name)
    assert (problem in found) if problem else found == ""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_connection_arguments(parser)
    return parser.parse_args(["--temporal-address", "localhost:7233", "--kubeconfig", "/k", *argv])


def test_the_task_queue_defaults_to_the_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEROLL_TASK_QUEUE", raising=False)
    monkeypatch.delenv("NODEROLL_CLUSTER", raising=False)
    assert settings_from_args(parse()).task_queue == "noderoll"
    clustered = settings_from_args(parse("--cluster", "eu-1"))
    assert (clustered.cluster, clustered.task_queue) == ("eu-1", "noderoll-eu-1")
    assert settings_from_args(parse("--cluster", "eu-1", "--task-queue", "q")).task_queue == "q"
    with pytest.raises(SystemExit, match="reserved"):
        settings_from_args(parse("--cluster", "global"))


def test_the_cluster_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEROLL_TASK_QUEUE", raising=False)
    monkeypatch.setenv("NODEROLL_CLUSTER", "us-1")
    assert settings_from_args(parse()).task_queue == "noderoll-us-1"


def test_worker_identity_carries_cluster_and_kube_and_still_its_version() -> None:
    plain = worker_identity()
    assert identity_fields(plain) == {} and identity_version(plain)
    named = worker_identity("eu-1", "uid-a")
    assert identity_fields(named) == {"cluster": "eu-1", "kube": "uid-a"}
    assert identity_version(named) == identity_version(plain)
    assert identity_fields("some-other-sdk@host") is None


A = "noderoll-worker/0.1.0@host-a:1"


@pytest.mark.parametrize(("me", "pollers", "running", "found"), [
    pytest.param(Identity("", "k1"), [A, A + ";kube=k1"], ["fleet/gpu", "node/n1"], [], id="same-unnamed"),
    pytest.param(Identity("eu-1", "k1"), [A + ";cluster=eu-1;kube=k1"], ["fleet/eu-1/gpu"], [], id="same-named"),
    pytest.param(Identity("eu-1", "k1"), [A], [], ["has no cluster name (this process: cluster name 'eu-1')"],
                 id="unnamed-worker-on-my-queue"),
    pytest.param(Identity("", "k1"), [A + ";cluster=us-1"], [], ["has cluster name 'us-1'"], id="named-worker"),
    pytest.param(Identity("", "k1"), [A + ";kube=k2"], [], ["another Kubernetes cluster (kube-system uid k2"],
                 id="two-unnamed-clusters"),
    pytest.param(Identity("eu-1", "k1"), [A + ";cluster=eu-1;kube=k2"], [], ["another Kubernetes cluster"],
                 id="one-name-two-clusters"),
    pytest.param(Identity("eu-1", ""), [A + ";cluster=eu-1;kube=k2"], [], [], id="own-uid-unknown"),
    pytest.param(Identity("eu-1", "k1"), ["temporal-cli@host"], ["fleet/gpu", "node/eu-1/n"],
                 ["workflows of another cluster run on it: fleet/gpu"], id="unnamed-fleets-on-my-queue"),
])
def test_conflicts(me: Identity, pollers: list[str], running: list[str], found: list[str]) -> None:
    got = conflicts(me, pollers, running)
    assert len(got) == len(found), got
    for text, expected in zip(got, found, strict=True):
        assert expected in text


def test_refusal_names_the_queue_and_the_way_out() -> None:
    text = refusal("bridge", "default", "noderoll", ["worker X has cluster name 'us-1'"])
    assert "noderoll bridge: refusing to start" in text and "'noderoll'" in text and "--cluster NAME" in text
