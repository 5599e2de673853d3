"""The data converter's TypeAdapter cache is one per worker process, not one per workflow run.

The SDK builds a payload converter for every workflow run it loads (`service.data_converter`'s
docstring); replaying the same node window history again must find every type's adapter built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from service.data_converter import data_converter, shared_type_adapter
from worker.registry import GLOBAL_WORKFLOWS, WORKFLOWS

HISTORY = Path(__file__).parent.parent / "histories" / "node" / "fleet-window-reboot-dependency-stages-in-one-pod.json"


async def _replay() -> None:
    history = WorkflowHistory.from_json("node/fleet-window-reboot-dependency-stages-in-one-pod", HISTORY.read_text())
    replayer = Replayer(workflows=[*WORKFLOWS, *GLOBAL_WORKFLOWS], data_converter=data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_a_second_workflow_run_builds_no_type_adapter() -> None:
    await _replay()  # the first run builds what is not cached yet
    built = shared_type_adapter.cache_info().misses
    hits = shared_type_adapter.cache_info().hits
    await _replay()
    await _replay()
    info = shared_type_adapter.cache_info()
    # Every payload of the two later runs (workflow input, activity results) found its adapter: the
    # types are the same objects in every sandboxed run, and the cache outlives each run's converter.
    assert info.misses == built, f"{info.misses - built} adapters built again by later runs"
    assert info.hits > hits


@dataclass
class _Sample:
    node: str
    packages: list[str]


async def test_payloads_are_those_of_temporalios_pydantic_converter() -> None:
    value = _Sample("node-a", ["nvidia-driver", "sysctl"])
    ours = await data_converter.encode([value])
    theirs = await pydantic_data_converter.encode([value])
    assert ours == theirs
    assert await data_converter.decode(theirs, [_Sample]) == [value]
    assert await pydantic_data_converter.decode(ours, [_Sample]) == [value]


async def test_an_unhashable_type_hint_still_decodes() -> None:
    unhashable = Annotated[dict[str, int], []]  # metadata of a list: hash() raises TypeError
    payloads = await data_converter.encode([{"a": 1}])
    assert await data_converter.decode(payloads, [unhashable]) == [{"a": 1}]
