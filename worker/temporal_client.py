"""One way to connect to Temporal for every noderoll process (worker, bridge, CLI, tests). Does I/O.

The pydantic data converter lets workflow and activity boundaries use pydantic models as well as
dataclasses; every client must use the same converter or payloads do not round-trip.
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter


async def connect(address: str, namespace: str = "default", *, api_key: str | None = None) -> Client:
    """Connect to the Temporal frontend at `address` (host:port) with noderoll's data converter."""
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=pydantic_data_converter,
        api_key=api_key,
        tls=bool(api_key),
    )
