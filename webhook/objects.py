"""The Packages that exist, read through the Kubernetes API for each admission. Does I/O (Kubernetes).

One LIST of Packages per Package admission (none for a DeploymentPolicy): admissions are rare
(people and GitOps syncs), Packages are few, and a fresh read sees an object created a moment
before (an informer cache would miss it for the length of a watch delay, and a cycle closed in
that gap would be admitted). The read is bounded (`READ_TIMEOUT`) well inside the webhook
configuration's `timeoutSeconds`, so a slow apiserver makes the webhook skip the conflict checks
with a warning instead of failing the request.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from api import keys

# (connect, read) seconds; the webhook configuration gives the whole call 10 s.
READ_TIMEOUT = (2.0, 4.0)


class PackageReader:
    """Lists Package objects by name; thread-safe (the HTTPS server answers in threads)."""

    def __init__(self, kubeconfig: str | None) -> None:
        self._kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self._api: client.ApiClient | None = None

    def _client(self) -> client.CustomObjectsApi:
        with self._lock:
            if self._api is None:
                configuration = client.Configuration()
                if self._kubeconfig:
                    config.load_kube_config(config_file=self._kubeconfig, client_configuration=configuration)
                else:
                    config.load_incluster_config(client_configuration=configuration)
                self._api = client.ApiClient(configuration)
            return client.CustomObjectsApi(self._api)

    def packages(self) -> tuple[Mapping[str, Mapping[str, Any]] | None, str]:
        """Every Package by name, or (None, why) when they cannot be read."""
        try:
            listing = self._client().list_cluster_custom_object(
                keys.GROUP, keys.VERSION, keys.PACKAGE_PLURAL, _request_timeout=READ_TIMEOUT)
        except ApiException as err:
            return None, f"{err.status} {err.reason}"
        except (HTTPError, OSError, config.ConfigException) as err:
            return None, f"{type(err).__name__}: {err}"
        items = listing.get("items") or []
        return {str(o["metadata"]["name"]): o for o in items if isinstance(o, dict)}, ""

    def close(self) -> None:
        """Release the connection pool."""
        with self._lock:
            if self._api is not None:
                self._api.close()
                self._api = None
