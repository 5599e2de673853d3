"""TLS settings for the Temporal client come from the environment the Helm chart sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from service import temporal_client as tc


def test_no_tls_variables_means_no_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in (tc.TLS_CERT_ENV, tc.TLS_KEY_ENV, tc.TLS_CA_ENV, tc.TLS_SERVER_NAME_ENV):
        monkeypatch.delenv(env, raising=False)
    assert tc.tls_from_env() is None


def test_client_certificate_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_bytes(b"CERT")
    (tmp_path / "tls.key").write_bytes(b"KEY")
    monkeypatch.setenv(tc.TLS_CERT_ENV, str(tmp_path / "tls.crt"))
    monkeypatch.setenv(tc.TLS_KEY_ENV, str(tmp_path / "tls.key"))
    # The chart always names ca.crt; a Secret without it means "trust the system roots".
    monkeypatch.setenv(tc.TLS_CA_ENV, str(tmp_path / "ca.crt"))
    monkeypatch.setenv(tc.TLS_SERVER_NAME_ENV, "temporal.example.internal")
    tls = tc.tls_from_env()
    assert tls is not None
    assert (tls.client_cert, tls.client_private_key, tls.server_root_ca_cert) == (b"CERT", b"KEY", None)
    assert tls.domain == "temporal.example.internal"


def test_certificate_without_key_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_bytes(b"CERT")
    monkeypatch.setenv(tc.TLS_CERT_ENV, str(tmp_path / "tls.crt"))
    monkeypatch.delenv(tc.TLS_KEY_ENV, raising=False)
    with pytest.raises(ValueError, match="must both"):
        tc.tls_from_env()


async def test_connect_waits_then_reports_an_unreachable_frontend() -> None:
    import socket

    from service.temporal_client import connect

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RuntimeError, match="connect"):
        await connect(f"127.0.0.1:{port}", wait_seconds=1.0)
