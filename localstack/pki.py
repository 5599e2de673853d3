"""The local control plane's PKI and kubeconfigs: one CA, serving and client certificates, SA keys.

Files live in `<state-dir>/pki/` and are created once (a restarted stack keeps trusting the
kubeconfigs handed out before); the admission webhook's serving certificate is added to an older
state dir from its CA. Client identities follow the kubeadm conventions so the
bootstrap RBAC of the apiserver applies: `admin` in group `system:masters`,
`system:kube-controller-manager`, `system:kube-scheduler`. Does I/O (writes files).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# First address of the service range: the `kubernetes` Service's ClusterIP must be in the serving cert.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
VALIDITY = datetime.timedelta(days=3650)
CLIENTS = {
    "admin": ("admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
}


@dataclass(frozen=True)
class Pki:
    """Paths of every PKI file of one state dir."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.root / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.root / "apiserver.key"

    @property
    def webhook_cert(self) -> Path:
        return self.root / "webhook.crt"

    @property
    def webhook_key(self) -> Path:
        return self.root / "webhook.key"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"

    def client_cert(self, client: str) -> Path:
        return self.root / f"{client}.crt"

    def client_key(self, client: str) -> Path:
        return self.root / f"{client}.key"

    def kubeconfig(self, client: str) -> Path:
        return self.root / f"{client}.kubeconfig"


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


@dataclass(frozen=True)
class _CertRequest:
    subject: x509.Name
    usage: x509.ObjectIdentifier
    sans: tuple[x509.GeneralName, ...] = ()


def _issue(req: _CertRequest, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(req.subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([req.usage]), critical=False)
    )
    if req.sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(req.sans)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _new_ca(pki: Pki) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = _name("noderoll-local-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write(pki.ca_key, _key_pem(key), private=True)
    _write(pki.ca_cert, cert.public_bytes(serialization.Encoding.PEM))


def _ensure_webhook_cert(pki: Pki) -> None:
    # The admission webhook's serving certificate, for the apiserver calling https://127.0.0.1:<port>.
    # Issued on its own so a state dir made before the webhook existed gets one from its CA.
    if pki.webhook_cert.exists() and pki.webhook_key.exists():
        return
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    sans = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert, key = _issue(_CertRequest(_name("noderoll-webhook"), ExtendedKeyUsageOID.SERVER_AUTH, sans), ca_cert, ca_key)
    _write(pki.webhook_key, key, private=True)
    _write(pki.webhook_cert, cert)


def ensure_pki(root: Path) -> Pki:
    """Create the CA, certificates and service-account keys under `root` unless they exist."""
    pki = Pki(root)
    root.mkdir(parents=True, exist_ok=True)
    if pki.ca_cert.exists() and pki.sa_pub.exists() and all(pki.client_cert(c).exists() for c in CLIENTS):
        _ensure_webhook_cert(pki)
        return pki
    _new_ca(pki)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    sans = (
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address(KUBERNETES_SERVICE_IP)),
    )
    serving = _CertRequest(_name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    cert, key = _issue(serving, ca_cert, ca_key)
    _write(pki.serving_cert, cert)
    _write(pki.serving_key, key, private=True)
    for client, (user, group) in CLIENTS.items():
        cert, key = _issue(_CertRequest(_name(user, group), ExtendedKeyUsageOID.CLIENT_AUTH), ca_cert, ca_key)
        _write(pki.client_cert(client), cert)
        _write(pki.client_key(client), key, private=True)
    # RSA for the service-account token keys: what every Kubernetes version accepts.
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(pki.sa_key, sa.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ), private=True)
    _write(pki.sa_pub, sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ))
    _ensure_webhook_cert(pki)
    return pki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_text(pki: Pki, client: str, server: str) -> str:
    """A self-contained kubeconfig (certificates embedded) for `client` against `server`."""
    user = CLIENTS[client][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "noderoll-local", "cluster": {
            "server": server, "certificate-authority-data": _b64(pki.ca_cert)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": _b64(pki.client_cert(client)),
            "client-key-data": _b64(pki.client_key(client))}}],
        "contexts": [{"name": "noderoll-local", "context": {"cluster": "noderoll-local", "user": user}}],
        "current-context": "noderoll-local",
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(path: Path, text: str) -> None:
    """Write a kubeconfig only when its content changed (keeps mtimes stable for watchers)."""
    if path.exists() and path.read_text() == text:
        return
    _write(path, text.encode(), private=True)
