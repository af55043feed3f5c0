"""Throw-away TLS certificates (a CA, a server and a client pair) for tests of TLS connections on 127.0.0.1."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any, NamedTuple

from .ports import HOST


class TlsFiles(NamedTuple):
    """PEM files made by :func:`make_certs`: a CA, a server certificate for 127.0.0.1, a client certificate."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def make_certs(directory: Path) -> TlsFiles:
    """A throw-away CA and the server and client certificates it signs (EC P-256, valid one day)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "reliability test CA")])

    def issue(subject: str, key: Any, ca: bool) -> bytes:
        builder = (
            x509.CertificateBuilder()
            .subject_name(ca_name if ca else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")]),
                critical=False,
            )
        return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    def write_key(path: Path, key: Any) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        path.chmod(0o600)

    files = TlsFiles(*(directory / name for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")))
    files.ca.write_bytes(issue("", ca_key, True))
    for cert, key_path, subject in ((files.cert, files.key, HOST), (files.client_cert, files.client_key, "client")):
        key = ec.generate_private_key(ec.SECP256R1())
        cert.write_bytes(issue(subject, key, False))
        write_key(key_path, key)
    return files
