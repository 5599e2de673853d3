"""`rerun` on a fleet (time-skipping test server, fake node workflows): only the nodes named, once per id."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from protocol import names
from protocol.fleet import FleetSpec, Rerun
from tests.helpers import unique_name
from tests.workflows.fleet_fakes import FakeNodes
from tests.workflows.skipping import skip
from tests.workflows.test_fleet import EXPONENTIAL, fleet, package, policy, settled


def reruns(nodes: FakeNodes, since: int) -> list[tuple[str, str, str, str]]:
    """(node, package, rerun id, stage) of the orders sent since request number `since`."""
    return [(node, o.name, o.rerun, o.rerun_stage) for node, r in nodes.requests[since:] for o in r.packages]


async def test_rerun_asks_only_the_named_nodes_once_per_id(temporal_test_env: WorkflowEnvironment) -> None:
    nodes = FakeNodes.of(3)
    spec = FleetSpec(unique_name("pol"), policy(EXPONENTIAL, budget=3), 1, [package("a"), package("b")])
    async with fleet(temporal_test_env, nodes, spec) as handle:
        await settled(handle)
        first = len(nodes.requests)
        target = sorted(nodes.nodes)[1]
        await handle.signal(names.SIGNAL_RERUN, Rerun("r1", "a", [target], "config"))
        await handle.signal(names.SIGNAL_RERUN, Rerun("r1", "a", [target], "config"))
        await skip(temporal_test_env, 60, handle)
        await settled(handle)
        assert reruns(nodes, first) == [(target, "a", "r1", "config")]
        # The annotation's rerun (in the desired state): every node, the whole sequence; repeated: once.
        second = len(nodes.requests)
        again = FleetSpec(spec.policy_name, spec.policy, 1, [package("a", rerun="k1"), package("b")])
        await handle.signal(names.SIGNAL_FLEET_SPEC, again)
        await handle.signal(names.SIGNAL_FLEET_SPEC, again)
        await skip(temporal_test_env, 60, handle)
        await settled(handle)
        asked = reruns(nodes, second)
        assert sorted(asked) == [(n, "a", "annotation:a:k1", "") for n in sorted(nodes.nodes)], asked
