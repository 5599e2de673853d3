"""Leader election on a `coordination.k8s.io/v1` Lease, so two bridge replicas may run. Does I/O (Kubernetes).

The protocol of client-go's leaderelection, reduced to what one process needs: every
`retry_seconds` the candidate reads the Lease; it takes it when the Lease is absent, free, or not
renewed for `lease_seconds` (expired), and renews it while it holds it. Writes are `replace` with the
read resourceVersion, so two candidates racing for an expired Lease cannot both win (one gets 409).
A leader renews from the Lease its last write returned, without reading it first (one request a
round instead of two, as client-go does since 1.26); a 409 means someone else wrote it, and the
same round reads it and decides as a candidate.
A leader that could not renew for `lease_seconds` stops acting before anyone else may take over
(`is_leader()` checks the time of the last successful renew). On shutdown the leader releases the
Lease (empty holder) so a standby takes over at its next try instead of after the expiry.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException

import kube
from api.keys import PACKAGE_POD_NAMESPACE, VERSION_ANNOTATION
from protocol.version import noderoll_version

log = logging.getLogger("noderoll.bridge.leader")
LEASE_NAME = "noderoll-bridge"


@dataclass(frozen=True)
class LeaseSettings:
    """Which Lease, who we are, and the timings (client-go defaults are 15 s / 2 s)."""

    identity: str
    namespace: str = PACKAGE_POD_NAMESPACE
    name: str = LEASE_NAME
    lease_seconds: int = 15
    retry_seconds: float = 2.0


def lease_expired(renew_time: datetime | None, lease_seconds: int, now: datetime) -> bool:
    """True when a Lease last renewed at `renew_time` may be taken over at `now`. Pure."""
    return renew_time is None or now - renew_time > timedelta(seconds=lease_seconds)


class LeaderElector:
    """One candidate for the bridge's Lease; call `try_acquire_or_renew()` every `retry_seconds`."""

    def __init__(self, settings: LeaseSettings) -> None:
        self.settings = settings
        self._renewed_at: float | None = None
        # The Lease as our last successful write returned it (its resourceVersion): what a leader renews.
        self._written: client.V1Lease | None = None

    def is_leader(self) -> bool:
        """True while the last successful renew is younger than the lease duration."""
        renewed = self._renewed_at
        return renewed is not None and time.monotonic() - renewed < self.settings.lease_seconds

    def _api(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(kube.api_client())

    def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; True when we hold the Lease afterwards. Never raises.

        Any error (an ApiException, or urllib3's MaxRetryError/ProtocolError while the apiserver is
        down or restarting) counts as "not renewed this round": we stay leader only while the last
        renew is younger than the lease, and the next round tries again.
        """
        try:
            return self._round()
        except Exception as err:  # noqa: BLE001 - the apiserver may be unreachable: retry next round
            log.warning("Lease %s/%s not renewed: %s", self.settings.namespace, self.settings.name, err)
            return self.is_leader()

    def _round(self) -> bool:
        s, now = self.settings, datetime.now(UTC)
        api = self._api()
        if self._written is not None and self.is_leader() and self._write(api, self._written, now, taking=False):
            return True
        try:
            lease = api.read_namespaced_lease(s.name, s.namespace or PACKAGE_POD_NAMESPACE)
        except ApiException as err:
            if not kube.is_not_found(err):
                log.warning("read Lease %s/%s: HTTP %s", s.namespace, s.name, err.status)
                return self.is_leader()
            return self._create(api, now)
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        if holder != s.identity and holder and not lease_expired(spec.renew_time, spec.lease_duration_seconds or s.lease_seconds, now):
            if self._renewed_at is not None:
                log.info("Lease %s/%s is held by %s; standing by", s.namespace, s.name, holder)
            self._renewed_at = None
            self._written = None
            return False
        if holder != s.identity:
            log.info("taking Lease %s/%s (was %s)", s.namespace, s.name, holder or "free")
        if self._write(api, lease, now, taking=holder != s.identity):
            return True
        return self.is_leader()

    def _write(self, api: client.CoordinationV1Api, lease: client.V1Lease, now: datetime, *, taking: bool) -> bool:
        """Replace the Lease with us as holder, renewed `now`, at `lease`'s resourceVersion; False on
        an API error (409: someone else wrote it since)."""
        s = self.settings
        spec = lease.spec or client.V1LeaseSpec()
        if taking:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = s.identity
        spec.lease_duration_seconds = s.lease_seconds
        spec.renew_time = now
        lease.spec = spec
        # `noderoll version`: the holder's version, on the Lease it renews.
        lease.metadata.annotations = {**(lease.metadata.annotations or {}), VERSION_ANNOTATION: noderoll_version()}
        try:
            written = api.replace_namespaced_lease(s.name, s.namespace or PACKAGE_POD_NAMESPACE, lease)
        except ApiException as err:
            # 409: someone else wrote it in between (renewed or took it): not ours this round.
            log.info("Lease %s/%s not renewed: HTTP %s", s.namespace, s.name, err.status)
            self._written = None
            return False
        self._written = written
        self._renewed_at = time.monotonic()
        return True

    def _create(self, api: client.CoordinationV1Api, now: datetime) -> bool:
        s = self.settings
        lease = client.V1Lease(
            metadata=client.V1ObjectMeta(name=s.name, namespace=s.namespace,
                                         annotations={VERSION_ANNOTATION: noderoll_version()}),
            spec=client.V1LeaseSpec(
                holder_identity=s.identity,
                lease_duration_seconds=s.lease_seconds,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            created = api.create_namespaced_lease(s.namespace or PACKAGE_POD_NAMESPACE, lease)
        except ApiException as err:
            if kube.is_not_found(err):
                log.warning("cannot create Lease %s/%s: namespace %s does not exist (create it, or use "
                            "--lease-namespace or --no-leader-election)", s.namespace, s.name, s.namespace)
            else:
                log.info("create Lease %s/%s: HTTP %s", s.namespace, s.name, err.status)
            return False
        log.info("created Lease %s/%s; leading", s.namespace, s.name)
        self._written = created
        self._renewed_at = time.monotonic()
        return True

    def release(self) -> None:
        """Give the Lease up (shutdown), when we hold it."""
        if not self.is_leader():
            return
        s = self.settings
        self._renewed_at = None
        self._written = None
        api = self._api()
        try:
            lease = api.read_namespaced_lease(s.name, s.namespace or PACKAGE_POD_NAMESPACE)
            if lease.spec and lease.spec.holder_identity == s.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = None
                api.replace_namespaced_lease(s.name, s.namespace or PACKAGE_POD_NAMESPACE, lease)
        except Exception as err:  # noqa: BLE001 - at shutdown; the Lease expires on its own anyway
            log.info("release Lease %s/%s: %s (it expires on its own)", s.namespace, s.name, err)
