"""noderoll's data converter: temporalio's pydantic converter with one TypeAdapter cache per process. Pure.

The SDK builds a workflow's payload converter afresh for every workflow run it loads into its
sandbox (`payload_converter_class()` per instance), and `PydanticJSONPlainPayloadConverter` keeps its
TypeAdapter cache on the instance: so every node window built the pydantic schema of its input and of
each activity result again, on the worker's one workflow thread. In a 200-node profile that was 6 %
of the worker's CPU (`TypeAdapter.__init__` under `from_payloads`; docs/benchmarks.md). Here the
cache lives in this module, shared by every instance (the class is handed into the sandbox as an
object, so its globals are this module's, not a sandbox copy).

The wire format is temporalio's pydantic converter's, unchanged: a client with `pydantic_data_converter`
(the SDK example in docs/operations.md) reads and writes the same payloads.

Keys are the type hints themselves. Every type noderoll's workflows exchange is defined outside the
sandbox (`protocol`, `api`, imported through `imports_passed_through`), so the keys are a fixed set;
a hint of a type re-imported inside the sandbox would be a new key per run, which the bound
(`MAX_CACHED_TYPE_ADAPTERS`, least recently used out) keeps from growing without end.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

# The distinct type hints of noderoll's workflows and activities are a few dozen.
MAX_CACHED_TYPE_ADAPTERS = 1024

# One cache for the process: `functools.lru_cache` is thread-safe (workflow activations run on the
# worker's thread pool) and a TypeAdapter is immutable once built.
shared_type_adapter = functools.lru_cache(maxsize=MAX_CACHED_TYPE_ADAPTERS)(TypeAdapter)


class SharedCacheJSONConverter(PydanticJSONPlainPayloadConverter):
    """`PydanticJSONPlainPayloadConverter` whose TypeAdapters come from the process-wide cache."""

    def __init__(self) -> None:
        super().__init__(max_cached_type_adapters=0)  # the instance's own cache: unused

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        """The payload's JSON validated as `type_hint` (Any when None), as the base class does."""
        hint: Any = type_hint if type_hint is not None else Any
        try:
            adapter: TypeAdapter[Any] = shared_type_adapter(hint)
        except TypeError:
            try:
                hash(hint)
            except TypeError:
                adapter = TypeAdapter(hint)  # an unhashable hint: no cache
            else:
                raise  # the hint is hashable: building its adapter failed
        return adapter.validate_json(payload.data)


class NoderollPayloadConverter(CompositePayloadConverter):
    """temporalio's default encodings, with JSON through `SharedCacheJSONConverter`
    (as `temporalio.contrib.pydantic.PydanticPayloadConverter` composes them)."""

    def __init__(self) -> None:
        json_converter = SharedCacheJSONConverter()
        super().__init__(*(json_converter if isinstance(c, JSONPlainPayloadConverter) else c
                           for c in DefaultPayloadConverter.default_encoding_payload_converters))


data_converter = DataConverter(payload_converter_class=NoderollPayloadConverter)
