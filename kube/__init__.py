"""The Kubernetes adapter: the client shared by the worker's activities, the bridge and the CLI, and API error classification. Does I/O.

The package `kube/` sits below `activities` and `crd_bridge` (import contract `layers`): `kube.nodes`
reads a Node (404 -> `NodeNotFound`), `kube.taints` writes the runtime-required taint.

One `ApiClient` per worker process (its urllib3 pool is thread-safe, and activities run in the
worker's thread pool); the pool keeps as many connections as the worker has activity threads
(`configure(..., pool_size)`), else threads beyond the client's default of 5 per CPU open and
throw away a connection per request. `configure(kubeconfig)` is called once by `noderoll worker`; without a
kubeconfig the in-cluster service account is used. Every `ApiException` is classified here, in one
place, so activities agree on what is retried (409, 429, 5xx, network), what means "gone" (404) and
what is a bug in our request (other 4xx, non-retryable).
"""

from __future__ import annotations

import json
import threading
from enum import StrEnum
from typing import Any, NoReturn

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from protocol import errors

_lock = threading.Lock()
_api_client: client.ApiClient | None = None
_kubeconfig: str | None = None
_pool_size: int | None = None
# Connections beyond the activity slots: the worker's own calls outside activities.
POOL_SPARE = 8
# (connect, read) seconds for every request without its own `_request_timeout`. The client's default
# is none at all: a connection that hangs would block its activity until start-to-close, since long
# activities heartbeat from a background thread (activities.heartbeats.keep_alive). The read timeout
# is per socket read and above every watch's server-side `timeout_seconds` (the bridge's 60 s is the
# longest), so a quiet watch is ended by the server, not cut here.
REQUEST_TIMEOUT = (10.0, 120.0)


class _TimedApiClient(client.ApiClient):
    """An ApiClient whose requests default to `REQUEST_TIMEOUT`."""

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        # Typed methods pass (method, url, headers, body, post_params) and `_request_timeout=`.
        if len(args) < 6 and not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = REQUEST_TIMEOUT
        return super().call_api(*args, **kwargs)


class ApiErrorKind(StrEnum):
    """What an API error means for the caller."""

    NOT_FOUND = "not-found"
    CONFLICT = "conflict"
    TOO_MANY_REQUESTS = "too-many-requests"
    SERVER = "server"
    CLIENT = "client"


def configure(kubeconfig: str | None, pool_size: int | None = None) -> None:
    """Use `kubeconfig` (a path) for the shared client; None means in-cluster config. Resets the client.

    `pool_size`: connections kept open (one per thread that calls the API at once); None keeps the
    client's default.
    """
    global _api_client, _kubeconfig, _pool_size
    with _lock:
        _kubeconfig = kubeconfig
        _pool_size = pool_size
        _api_client = None


def new_api_client(kubeconfig: str | None, pool_size: int | None = None) -> client.ApiClient:
    """A new ApiClient from `kubeconfig` (a path), else the in-cluster service account, whose requests
    default to `REQUEST_TIMEOUT`. `kubernetes.config.ConfigException` when neither is there.

    The CLI builds its own (one per command, closed after it); the worker and the bridge share
    `api_client()`."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    return _TimedApiClient(configuration)


def api_client() -> client.ApiClient:
    """The process-wide ApiClient, built on first use from the configured kubeconfig or in-cluster."""
    global _api_client
    with _lock:
        if _api_client is None:
            _api_client = new_api_client(_kubeconfig, _pool_size)
        return _api_client


def core() -> client.CoreV1Api:
    """Core/v1 API on the shared client."""
    return client.CoreV1Api(api_client())


def custom() -> client.CustomObjectsApi:
    """Custom objects (noderoll.io Packages) on the shared client."""
    return client.CustomObjectsApi(api_client())


def policy() -> client.PolicyV1Api:
    """Policy/v1 API on the shared client (PDB reads fall back to v1beta1 through raw calls)."""
    return client.PolicyV1Api(api_client())


def classify(err: ApiException) -> ApiErrorKind:
    """Classify an API error by HTTP status (0/None = network error, treated like a 5xx)."""
    status = err.status or 0
    if status == 404:
        return ApiErrorKind.NOT_FOUND
    if status == 409:
        return ApiErrorKind.CONFLICT
    if status == 429:
        return ApiErrorKind.TOO_MANY_REQUESTS
    if status == 0 or status >= 500:
        return ApiErrorKind.SERVER
    return ApiErrorKind.CLIENT


def is_not_found(err: ApiException) -> bool:
    """True for 404."""
    return classify(err) is ApiErrorKind.NOT_FOUND


def is_gone(err: ApiException) -> bool:
    """True for 410 Gone: a watch's or list's resourceVersion is too old; list again."""
    return err.status == 410


def is_conflict(err: ApiException) -> bool:
    """True for 409 (resourceVersion conflict or AlreadyExists)."""
    return classify(err) is ApiErrorKind.CONFLICT


def is_retryable(err: ApiException) -> bool:
    """True for errors a later attempt may not see: conflicts, throttling, server and network errors."""
    return classify(err) in (ApiErrorKind.CONFLICT, ApiErrorKind.TOO_MANY_REQUESTS, ApiErrorKind.SERVER)


def raise_for(err: ApiException, context: str) -> NoReturn:
    """Re-raise `err` with context: retryable kinds stay retryable, other 4xx become non-retryable."""
    if is_retryable(err):
        raise RuntimeError(f"{context}: HTTP {err.status} {err.reason}") from err
    raise errors.fatal(f"{context}: HTTP {err.status} {err.reason}: {err.body}", errors.KUBE_CLIENT_ERROR) from err


def request_json(method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
                 api: client.ApiClient | None = None) -> Any:
    """A raw JSON request, for API versions the typed client lacks (policy/v1beta1) and for answers read as
    JSON without building typed models (the CLI's Node listing); on the shared client unless `api` is given.

    Non-2xx answers raise ApiException, like the typed methods.
    """
    api = api or api_client()
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    serialized = api.param_serialize(
        method=method, resource_path=path, query_params=query or [], header_params=headers, body=body,
        auth_settings=["BearerToken"]
    )
    response = api.call_api(*serialized)
    response.read()
    return api.response_deserialize(response, {"2XX": "object"}).data


def untyped(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A typed client method's answer as raw JSON, not built into the client's model objects.

    For the worker's hot calls whose answer it reads little of (a created stage pod's uid, a patched
    node's conditions, the pods a delete-collection removed, the fleet's node listing, which
    `node_facts` reads as JSON anyway): building the typed answer was most of those calls' CPU in a
    200-node profile (ADR 0019). Non-2xx answers raise ApiException, as the typed call does.
    """
    response = call(*args, _preload_content=False, **kwargs)
    try:
        data = response.data
    finally:
        response.release_conn()
    return json.loads(data) if data else {}
