"""One way to connect to Temporal for every noderoll process (worker, bridge, CLI, tests). Does I/O.

noderoll's data converter (`service.data_converter`: temporalio's pydantic converter, its TypeAdapters
cached per process) lets workflow and activity boundaries use pydantic models as well as dataclasses;
every client must use the same converter (or temporalio's `pydantic_data_converter`, whose payloads
are the same) or payloads do not round-trip.

Authentication comes from the environment so that every process (and the Helm chart, which mounts the
client certificate Secret and sets these variables) configures it the same way:
`NODEROLL_TEMPORAL_API_KEY` (Temporal Cloud API key; implies TLS), `NODEROLL_TEMPORAL_TLS_CERT` and
`NODEROLL_TEMPORAL_TLS_KEY` (mutual TLS client certificate files), `NODEROLL_TEMPORAL_TLS_CA` (server CA
file; optional, the system roots otherwise) and `NODEROLL_TEMPORAL_TLS_SERVER_NAME` (SNI override).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from temporalio.client import Client, TLSConfig

from service.data_converter import data_converter

API_KEY_ENV = "NODEROLL_TEMPORAL_API_KEY"
TLS_CERT_ENV = "NODEROLL_TEMPORAL_TLS_CERT"
TLS_KEY_ENV = "NODEROLL_TEMPORAL_TLS_KEY"
TLS_CA_ENV = "NODEROLL_TEMPORAL_TLS_CA"
TLS_SERVER_NAME_ENV = "NODEROLL_TEMPORAL_TLS_SERVER_NAME"
# Long-running processes (worker, bridge) wait this long for a frontend that is down or restarting.
SERVICE_CONNECT_WAIT_SECONDS = 300.0

log = logging.getLogger(__name__)


def _read(env: str) -> bytes | None:
    path = os.environ.get(env)
    # A CA file the Secret does not carry (publicly signed server) is simply absent.
    return Path(path).read_bytes() if path and Path(path).is_file() else None


def tls_from_env() -> TLSConfig | None:
    """The TLS settings of the environment variables above, or None when none is set."""
    cert, key, ca = _read(TLS_CERT_ENV), _read(TLS_KEY_ENV), _read(TLS_CA_ENV)
    server_name = os.environ.get(TLS_SERVER_NAME_ENV) or None
    if not (cert or key or ca or server_name):
        return None
    if bool(cert) != bool(key):
        raise ValueError(f"{TLS_CERT_ENV} and {TLS_KEY_ENV} must both name readable files")
    return TLSConfig(server_root_ca_cert=ca, client_cert=cert, client_private_key=key, domain=server_name)


async def connect(
    address: str, namespace: str = "default", *, api_key: str | None = None, wait_seconds: float = 0.0
) -> Client:
    """Connect to the Temporal frontend at `address` (host:port) with noderoll's data converter.

    With `wait_seconds` > 0 a refused connection is retried with backoff until that much time has
    passed: a worker or bridge started while Temporal restarts waits for it instead of exiting.
    """
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    tls: TLSConfig | bool = tls_from_env() or bool(api_key)
    deadline = time.monotonic() + wait_seconds
    delay = 0.5
    while True:
        try:
            return await Client.connect(
                address,
                namespace=namespace,
                data_converter=data_converter,
                api_key=api_key,
                tls=tls,
            )
        except RuntimeError as err:
            # The SDK reports transport failures as RuntimeError("Failed client connect: ...").
            if time.monotonic() + delay > deadline:
                raise
            log.warning("Temporal at %s not reachable (%s); retrying in %.1fs", address, err, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
