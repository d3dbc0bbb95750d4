"""A throwaway PKI for TLS tests: a CA, a server certificate for localhost, a client
certificate for mTLS, written as PEM files (nothing is fetched or shared between runs)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "localhost"
CLIENT_NAME = "dplan-test-client"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    usage: list[x509.ObjectIdentifier],
    names: list[x509.GeneralName],
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    """CA → server (``localhost`` and 127.0.0.1) and CA → client, all in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(
        "dplan test CA", ca_key, _name("dplan test CA"), ca_key, ca=True, usage=[], names=[]
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        SERVER_NAME,
        server_key,
        ca.subject,
        ca_key,
        ca=False,
        usage=[ExtendedKeyUsageOID.SERVER_AUTH],
        names=[x509.DNSName(SERVER_NAME), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(
        CLIENT_NAME,
        client_key,
        ca.subject,
        ca_key,
        ca=False,
        usage=[ExtendedKeyUsageOID.CLIENT_AUTH],
        names=[],
    )
    pki = Pki(
        ca_cert=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server-key.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
    )
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pki.client_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, pki.server_key)
    _write_key(client_key, pki.client_key)
    return pki
