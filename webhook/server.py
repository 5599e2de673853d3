"""The webhook's HTTPS server: POST /validate answers AdmissionReviews, GET /healthz says it runs.
Does I/O (a TLS socket, the Kubernetes API through `webhook.objects`).

The standard library's threading HTTP server with a TLS context: one thread per connection (the
apiserver keeps a few connections open and sends requests one at a time on each), a bounded body
(`MAX_BODY_BYTES`), and the serving certificate reloaded when its files change (cert-manager and
the chart's Secret rotate it in place; the kubelet updates the mounted files), so a rotation needs
no restart. Each decision is logged on one line: operation, kind/name, allowed or the problems.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from api import keys
from api.admission import decide
from webhook.objects import PackageReader
from webhook.review import ReviewError, admission_input, parse_review, response

log = logging.getLogger("noderoll.webhook")
VALIDATE_PATH = "/validate"
HEALTH_PATH = "/healthz"
# An AdmissionReview carries the object and, for an UPDATE, the stored one: twice the apiserver's
# 3 MiB request limit, plus room.
MAX_BODY_BYTES = 8 * 2**20
RELOAD_CHECK_SECONDS = 30.0
# The apiserver closes idle connections; a stuck client must not hold a thread forever.
SOCKET_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class ServerOptions:
    """Where to listen and which certificate to serve."""

    bind_address: str
    port: int
    tls_cert: Path
    tls_key: Path


class CertificateFiles:
    """The serving certificate, reloaded into the same TLS context when its files change."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp = self._mtimes()
        self.context.load_cert_chain(str(cert), str(key))

    def _mtimes(self) -> tuple[float, float]:
        return self.cert.stat().st_mtime, self.key.stat().st_mtime

    def reload_if_changed(self) -> bool:
        """Load the files again when they changed; True when it did. A half-written pair is retried later."""
        try:
            stamp = self._mtimes()
            if stamp == self._stamp:
                return False
            # New connections use the new chain; open ones keep the one they negotiated.
            self.context.load_cert_chain(str(self.cert), str(self.key))
        except (OSError, ssl.SSLError) as err:
            log.warning("serving certificate not reloaded (%s); keeping the current one", err)
            return False
        self._stamp = stamp
        log.info("serving certificate reloaded from %s", self.cert)
        return True


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == HEALTH_PATH:
            self._send(HTTPStatus.OK, b"ok\n", "text/plain")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.split("?")[0] != VALIDATE_PATH:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE if length > 0 else HTTPStatus.LENGTH_REQUIRED,
                       b"an AdmissionReview with a Content-Length is expected\n", "text/plain")
            return
        try:
            answer = self.server.answer(json.loads(self.rfile.read(length)))
        except (ReviewError, ValueError) as err:
            log.warning("refused a malformed request from %s: %s", self.address_string(), err)
            self._send(HTTPStatus.BAD_REQUEST, f"{err}\n".encode(), "text/plain")
            return
        self._send(HTTPStatus.OK, json.dumps(answer).encode())


class WebhookServer(ThreadingHTTPServer):
    """Answers AdmissionReviews over TLS (module docstring)."""

    daemon_threads = True

    def __init__(self, options: ServerOptions, reader: PackageReader) -> None:
        super().__init__((options.bind_address, options.port), _Handler)
        self.reader = reader
        self.certificates = CertificateFiles(options.tls_cert, options.tls_key)
        # The TLS handshake happens on the first read, in the connection's thread: a slow client
        # never holds up the accept loop.
        self.socket = self.certificates.context.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False)
        self._stop = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that fails the handshake or goes away: one line, not a traceback.
        log.info("connection from %s ended with an error", client_address[0] if client_address else "?",
                 exc_info=log.isEnabledFor(logging.DEBUG))

    def get_request(self) -> tuple[Any, Any]:
        conn, address = super().get_request()
        conn.settimeout(SOCKET_TIMEOUT_SECONDS)
        return conn, address

    def answer(self, body: Any) -> dict[str, Any]:
        """The AdmissionReview answering `body` (ReviewError when it is none)."""
        began = time.monotonic()
        review = parse_review(body)
        packages, reason = (None, "")
        if review.kind == keys.PACKAGE_KIND and review.operation in ("CREATE", "UPDATE"):
            packages, reason = self.reader.packages()
        decision = decide(admission_input(review, packages, reason))
        verdict = "allowed" if decision.allowed else "denied: " + decision.message.replace("\n", " | ")
        log.info("%s %s/%s%s %s (%.0f ms)%s", review.operation, review.kind, review.name,
                 " (dry run)" if review.dry_run else "", verdict, (time.monotonic() - began) * 1000,
                 "; warning: " + "; ".join(decision.warnings) if decision.warnings else "")
        return response(review, decision)

    def watch_certificates(self) -> None:
        """Reload the certificate when its files change, until `stop_watching`."""
        while not self._stop.wait(RELOAD_CHECK_SECONDS):
            self.certificates.reload_if_changed()

    def stop_watching(self) -> None:
        self._stop.set()
