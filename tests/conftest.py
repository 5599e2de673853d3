"""Session fixtures: the real local stack (Temporal dev server + Kubernetes control plane) and clients.

* `local_stack` -> `localstack.state.StackInfo`: the stack named by `NODEROLL_TEST_STACK=<state-dir>`
  when that one runs (fast iteration: `noderoll dev up --state-dir X` once, then
  `NODEROLL_TEST_STACK=X pytest ...`), otherwise one stack per test process (each pytest-xdist worker) in a temporary state
  dir, started with the same code as `noderoll dev up` and stopped at the end of the session.
* `kube_api_client`, `temporal_client`: clients of that stack (session scope).
* `temporal_test_env`: the time-skipping test server (tests/workflows), no stack needed: one per session,
  probed after each test; a test that leaves it unable to skip time fails at teardown and the next
  tests get a new one.
* `k8s_namespace`: a fresh namespace per test, ready for pods.
Fixtures are lazy: unit tests that request none of them never start anything. Tests requesting
a stack fixture are marked `integration` automatically (so `-m "not integration"` never starts it).
A skip outside the Docker tier fails the run unless `NODEROLL_ALLOW_SKIPS=1` (tests/helpers/skip_policy.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.helpers import skip_policy, unique_name
from tests.helpers.workflows_cleanup import STARTED_STACKS

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from temporalio.client import Client
    from temporalio.testing import WorkflowEnvironment

    from localstack.state import StackInfo

TEST_STACK_ENV = "NODEROLL_TEST_STACK"
STACK_FIXTURES = frozenset({"local_stack", "kube_api_client", "temporal_client", "k8s_namespace"})
TESTS_ROOT = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    """The skip policy: every skip's reason printed, and one outside the Docker tier fails the run. The fleet's
    work index and node views are checked against a computation from scratch at every use
    (planning/rollout/work_index.py, planning/views/fleet_nodes.py)."""
    skip_policy.register(config)
    from planning.rollout import work_index
    from planning.views import fleet_nodes

    work_index.CHECK = True
    fleet_nodes.CHECK = True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark by tier: tests/integration and stack users `integration`, tests/workflows `workflows`."""
    for item in items:
        path = Path(item.path)
        fixtures = set(getattr(item, "fixturenames", ()))
        if (TESTS_ROOT / "integration") in path.parents or fixtures & STACK_FIXTURES:
            item.add_marker(pytest.mark.integration)
        if (TESTS_ROOT / "workflows") in path.parents:
            item.add_marker(pytest.mark.workflows)


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """The running local stack for this test session (see the module docstring)."""
    from localstack.stack import down, up
    from localstack.state import load_stack_info

    shared = os.environ.get(TEST_STACK_ENV)
    if shared:
        info = load_stack_info(shared)
        if info is not None and info.is_running():
            STARTED_STACKS.append(info)
            yield info
            return
        print(f"\n{TEST_STACK_ENV}={shared} runs no stack; starting a private one", file=sys.stderr)
    state_dir = tmp_path_factory.mktemp("stack")
    try:
        # Tied to this process: a pytest killed by a timeout leaves no stack behind.
        info = up(state_dir, die_with_parent=True)
    except BaseException:
        down(state_dir)
        raise
    STARTED_STACKS.append(info)
    try:
        yield info
    finally:
        STARTED_STACKS.clear()
        down(state_dir)


@pytest.fixture(scope="session")
def kube_api_client(local_stack: StackInfo) -> Iterator[ApiClient]:
    """A `kubernetes.client.ApiClient` authenticated as the stack's admin (group system:masters)."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=local_stack.kubeconfig)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
async def temporal_client(local_stack: StackInfo) -> Client:
    """A Temporal client of the stack's dev server (namespace `default`, noderoll's data converter)."""
    from service.temporal_client import connect

    return await connect(local_stack.temporal_address)


@pytest.fixture(scope="session")
async def time_skipping_server() -> AsyncIterator[list[WorkflowEnvironment]]:
    """The session's time-skipping test server, in a one-item list (`temporal_test_env` may replace it)."""
    from tests.workflows.skipping import start_server

    holder = [await start_server()]
    try:
        yield holder
    finally:
        await holder[0].shutdown()


# After each test, two minutes of virtual time must pass within SKIP_PROBE_SECONDS (it takes milliseconds):
# when they do not, a workflow task the server refused holds its time-skipping lock and its clock only
# runs at real pace (tests/workflows/skipping.py).
SKIP_PROBE = 120
SKIP_PROBE_SECONDS = 20


@pytest.fixture
async def temporal_test_env(time_skipping_server: list[WorkflowEnvironment]) -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server (`tests.workflows.skipping.start_server`); one per session, unless a
    test leaves it unable to skip time: that test fails at teardown and the next tests get a new server
    (one failure, not every later test that sleeps in virtual time)."""
    from tests.workflows.skipping import start_server

    env = time_skipping_server[0]
    yield env
    try:
        await asyncio.wait_for(env.sleep(SKIP_PROBE), SKIP_PROBE_SECONDS)
    except TimeoutError:
        time_skipping_server[0] = await start_server()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(env.shutdown(), 10)
        pytest.fail(f"the time-skipping test server could not skip {SKIP_PROBE} s within {SKIP_PROBE_SECONDS} s after this "
                    "test (a workflow task it refused holds its lock; tests/workflows/skipping.py): the next "
                    "tests get a new server")


@pytest.fixture
def k8s_namespace(kube_api_client: ApiClient) -> Iterator[str]:
    """A fresh namespace for one test, ready for pods; deleted afterwards (without waiting)."""
    from kubernetes import client

    from tests.helpers.kube import create_namespace, delete_namespace

    core = client.CoreV1Api(kube_api_client)
    name = unique_name("ns")
    create_namespace(core, name)
    try:
        yield name
    finally:
        delete_namespace(core, name)
