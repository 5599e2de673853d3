"""The fleet's node listing shows every node write completed before it (`kube.nodes.list_node_facts`);
the raw read of one node (`kube.nodes.read_node_json`) shows its metadata, and a missing node fails for good.

An uninstall wave once reported a Package uninstalled everywhere while one node still had it: the
listing, served from the apiserver's watch cache, did not show that node's install yet, recorded a
few seconds before. Here a node's state is written and listed at once, many times: a listing from
the watch cache misses a write now and then even on an idle machine (2 to 7 in 1,000 when measured, more
under load), so two thousand rounds (about 17 s) with no miss show the listing reads what was written.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from temporalio.exceptions import ApplicationError

import kube
import kube.nodes as kube_nodes
from api.keys import NODE_STATE_ANNOTATION
from kube.nodes import list_node_facts, read_node_json
from localstack.state import StackInfo
from protocol import errors
from tests.helpers import unique_name

pytestmark = pytest.mark.integration
ROUNDS = 2000


@pytest.fixture
def listed_node(local_stack: StackInfo, kube_api_client: ApiClient) -> Iterator[tuple[str, str]]:
    """A bare Node object (no kubelet needed to write and list it) with a label only it carries."""
    kube.configure(local_stack.kubeconfig)
    core = client.CoreV1Api(kube_api_client)
    name = unique_name("listing")
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"listing-test": name})))
    try:
        yield name, f"listing-test={name}"
    finally:
        core.delete_node(name)


def test_a_listing_shows_the_node_state_written_just_before_it(
    listed_node: tuple[str, str], kube_api_client: ApiClient,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    name, selector = listed_node
    missed: list[int] = []
    for round_ in range(ROUNDS):
        state = f'{{"round": {round_}}}'
        core.patch_node(name, {"metadata": {"annotations": {NODE_STATE_ANNOTATION: state}}})
        [facts] = list_node_facts(selector)
        if facts.state_annotation != state:
            missed.append(round_)
    assert not missed, f"{len(missed)} of {ROUNDS} listings did not show the write before them: rounds {missed[:10]}"


def test_a_listing_of_several_pages_returns_every_node_once(
    local_stack: StackInfo, kube_api_client: ApiClient, monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube.configure(local_stack.kubeconfig)
    core = client.CoreV1Api(kube_api_client)
    group = unique_name("paged")
    names = [f"{group}-{i}" for i in range(5)]
    for name in names:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"paged-test": group})))
    monkeypatch.setattr(kube_nodes, "PAGE_SIZE", 2)  # 5 nodes: pages of 2, 2 and 1 (two continue tokens)
    pages: list[int] = []
    try:
        listed = list_node_facts(f"paged-test={group}", pages.append)
    finally:
        for name in names:
            core.delete_node(name)
    assert [facts.name for facts in listed] == sorted(names)
    assert pages == [2, 4, 5]
    assert all(facts.labels == {"paged-test": group} for facts in listed)


def test_a_node_read_as_raw_json_shows_its_metadata_and_a_missing_one_fails_for_good(
    listed_node: tuple[str, str], kube_api_client: ApiClient,
) -> None:
    core = client.CoreV1Api(kube_api_client)
    name, _selector = listed_node
    core.patch_node(name, {"metadata": {"annotations": {NODE_STATE_ANNOTATION: '{"packages":{}}'}}})
    node = read_node_json(name)
    assert node["metadata"]["labels"]["listing-test"] == name
    assert node["metadata"]["annotations"][NODE_STATE_ANNOTATION] == '{"packages":{}}'
    gone = unique_name("gone")
    with pytest.raises(ApplicationError) as failure:
        read_node_json(gone)
    assert failure.value.type == errors.NODE_NOT_FOUND and failure.value.non_retryable
    assert str(failure.value).endswith(f"node {gone} does not exist")
