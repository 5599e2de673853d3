"""A small JSON client for the kube-apiserver, tuned for many cheap requests. Does network I/O.

fleetsim talks to the API server for up to 1,000 nodes on 2 cores, so it skips the generated
client's model (de)serialisation and speaks JSON dicts over one urllib3 pool. Credentials and TLS
come from the kubeconfig through the `kubernetes` package's loader.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client, config

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON = "application/json"


class KubeError(Exception):
    """A non-2xx answer from the API server (status 0: no answer at all)."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status

    @property
    def transient(self) -> bool:
        """No answer, 429 or 5xx: the same request may succeed later (an apiserver restarting)."""
        return self.status in (0, 429) or self.status >= 500


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch stream (`type` ADDED/MODIFIED/DELETED/BOOKMARK/ERROR)."""

    type: str
    object: dict[str, Any]


class Kube:
    """JSON requests against one API server; thread-safe (urllib3 pools are)."""

    def __init__(self, kubeconfig: str | None, pool_size: int = 16) -> None:
        cfg = client.Configuration()
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        else:
            config.load_incluster_config(client_configuration=cfg)
        self.base = cfg.host.rstrip("/")
        self.headers = {"Accept": JSON, "User-Agent": "noderoll-fleetsim"}
        token = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
        if token:
            self.headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
        self.pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=pool_size,
            block=True,
            cert_reqs="CERT_REQUIRED" if cfg.verify_ssl else "CERT_NONE",
            ca_certs=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
        )
        self._streams: set[urllib3.BaseHTTPResponse] = set()
        self._lock = threading.Lock()

    def request(
        self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None, content_type: str = JSON
    ) -> dict[str, Any]:
        """One request; returns the decoded JSON answer or raises KubeError."""
        url = self.base + path + (f"?{urlencode(query)}" if query else "")
        headers = dict(self.headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            resp = self.pool.request(method, url, body=data, headers=headers, timeout=urllib3.Timeout(connect=10, read=60))
        except urllib3.exceptions.HTTPError as err:
            raise KubeError(0, method, path, f"no answer: {err}") from err
        if resp.status >= 300:
            raise KubeError(resp.status, method, path, resp.data.decode("utf-8", "replace"))
        return json.loads(resp.data) if resp.data else {}

    def watch(self, path: str, query: dict[str, Any]) -> Iterator[WatchEvent]:
        """Stream a watch (`?watch=1`); ends when the server closes it or `close_streams` is called."""
        url = self.base + path + "?" + urlencode({**query, "watch": "1"})
        try:
            resp = self.pool.request("GET", url, headers=self.headers, preload_content=False, timeout=urllib3.Timeout(connect=10, read=None))
        except urllib3.exceptions.HTTPError as err:
            raise KubeError(0, "WATCH", path, f"no answer: {err}") from err
        if resp.status >= 300:
            body = resp.read().decode("utf-8", "replace")
            resp.release_conn()
            raise KubeError(resp.status, "WATCH", path, body)
        with self._lock:
            self._streams.add(resp)
        buffer = b""
        try:
            for chunk in resp.stream(64 * 1024, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield WatchEvent(event.get("type", ""), event.get("object") or {})
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            return  # closed under us (stop) or the server went away: the caller re-lists
        finally:
            with self._lock:
                self._streams.discard(resp)
            resp.release_conn()

    def close_streams(self) -> None:
        """Abort every open watch (used to stop promptly)."""
        with self._lock:
            streams = list(self._streams)
        for resp in streams:
            try:
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                resp.close()


def quoted(name: str) -> str:
    """URL-quote an object name for a path segment."""
    return quote(name, safe="")


def pod_path(pod: dict[str, Any]) -> str:
    """API path of a pod."""
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{quoted(meta['namespace'])}/pods/{quoted(meta['name'])}"


# Like the kubelet's status manager, a pod status the apiserver could not take (restarting, 5xx,
# 429) is written again until it lands; otherwise a stage pod that finished during an apiserver
# restart would stay Running forever and its stage would wait for its whole timeout. The final
# grace-0 delete of a terminated pod is retried the same way (a lost one leaves the pod Terminating
# for good, and a drain waiting for it never ends).
STATUS_RETRY_SECONDS = 120.0
# How long a node's own status and a node back from a reboot listing its pods keep trying while the
# apiserver is away, as a kubelet does for good (longer than any outage the tests make).
KUBELET_RETRY_SECONDS = 600.0


def until_landed(call: Callable[[], Any], done: tuple[int, ...] = (404,), seconds: float | None = None,
                 stopping: threading.Event | None = None) -> Any:
    """Run `call` until the apiserver takes it and return its answer: no answer, 429 and 5xx are
    retried with backoff for `seconds` (default STATUS_RETRY_SECONDS), not once `stopping` is set (the
    simulator shuts down: its stop waits for this thread); a KubeError whose status is in `done`
    counts as landed (None); others raise."""
    deadline = time.monotonic() + (STATUS_RETRY_SECONDS if seconds is None else seconds)
    delay = 0.5
    while True:
        try:
            return call()
        except KubeError as err:
            if err.status in done:
                return None
            if not err.transient or time.monotonic() > deadline or (stopping is not None and stopping.is_set()):
                raise
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def patch_status(kube: Kube, pod: dict[str, Any], status: dict[str, Any]) -> None:
    """Write a pod's status through the pods/status subresource; a vanished pod is fine."""
    until_landed(lambda: kube.request("PATCH", pod_path(pod) + "/status", {"status": status}, content_type=MERGE_PATCH))
