"""`noderoll webhook`: the validating admission webhook process. Does I/O (TLS socket, Kubernetes).

Serves POST /validate (AdmissionReview v1 and v1beta1, for CREATE and UPDATE of Packages and
DeploymentPolicies; the rules are `api/admission.py`) and GET /healthz over HTTPS with the
certificate of `--tls-cert`/`--tls-key` (the Helm chart mounts its Secret at
/etc/noderoll/webhook-tls; `noderoll dev up` issues one from the local CA). Reads the existing
Packages with `--kubeconfig`, else `KUBECONFIG`, else the running dev stack, else in-cluster.
Imports no workflow, activity or Temporal code (`.importlinter`): it starts fast and fails alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from localstack.state import resolve_connection
from webhook.objects import PackageReader
from webhook.server import ServerOptions, WebhookServer

PORT_ENV = "NODEROLL_WEBHOOK_PORT"
CERT_ENV = "NODEROLL_WEBHOOK_TLS_CERT"
KEY_ENV = "NODEROLL_WEBHOOK_TLS_KEY"
DEFAULT_PORT = 9443
DEFAULT_CERT_DIR = Path("/etc/noderoll/webhook-tls")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `noderoll webhook` (also `python -m webhook`)."""
    parser.add_argument("--port", type=int, default=int(os.environ.get(PORT_ENV) or DEFAULT_PORT),
                        help=f"HTTPS port (${PORT_ENV}, default {DEFAULT_PORT})")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address to listen on (default all)")
    parser.add_argument("--tls-cert", default=os.environ.get(CERT_ENV) or str(DEFAULT_CERT_DIR / "tls.crt"),
                        help=f"serving certificate, PEM (${CERT_ENV}; default {DEFAULT_CERT_DIR}/tls.crt)")
    parser.add_argument("--tls-key", default=os.environ.get(KEY_ENV) or str(DEFAULT_CERT_DIR / "tls.key"),
                        help=f"its private key, PEM (${KEY_ENV}; default {DEFAULT_CERT_DIR}/tls.key)")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, the dev stack, in-cluster)")
    parser.add_argument("--state-dir", help="dev stack state dir whose kubeconfig to use")
    parser.add_argument("--log-level", default=os.environ.get("NODEROLL_LOG_LEVEL", "INFO"))


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; exit 1 when the certificate cannot be loaded or the port is taken."""
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("noderoll.webhook")
    kubeconfig = resolve_connection(None, args.kubeconfig, args.state_dir).kubeconfig
    options = ServerOptions(args.bind_address, args.port, Path(args.tls_cert), Path(args.tls_key))
    reader = PackageReader(kubeconfig)
    try:
        server = WebhookServer(options, reader)
    except (OSError, ValueError) as err:
        print(f"noderoll webhook: cannot serve on {args.bind_address}:{args.port} with {args.tls_cert}: {err}",
              file=sys.stderr)
        return 1

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        # shutdown() waits for serve_forever, which runs in this thread: call it from another one.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=server.watch_certificates, daemon=True, name="cert-reload").start()
    log.info("webhook on https://%s:%d/validate (kubeconfig %s)", args.bind_address, args.port,
             kubeconfig or "in-cluster")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.stop_watching()
        server.server_close()
        reader.close()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `noderoll webhook`."""
    parser = subparsers.add_parser(
        "webhook",
        help="the validating admission webhook for Packages and DeploymentPolicies (HTTPS)",
        description="Refuse invalid Packages and DeploymentPolicies at `kubectl apply`, with the checks and "
                    "messages of `noderoll validate`, plus conflicts with the Packages that exist (a "
                    "dependency at another version, a dependency cycle). References to objects that do not "
                    "exist yet are admitted. See docs/operations.md.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """`python -m webhook`: the same as `noderoll webhook`."""
    parser = argparse.ArgumentParser(prog="noderoll webhook")
    add_arguments(parser)
    return run(parser.parse_args(argv))
