"""The DSNs' TLS settings (sslmode=verify-full, sslrootcert=system) with the driver the functions use.

infra/database.yaml writes every DSN with them, and template.yaml points OpenSSL at the runtime's
roots with SSL_CERT_FILE, because the OpenSSL inside psycopg's binary wheel looks for the system's
roots in a folder of its own build. The embedded PostgreSQL is built without TLS, so a small
server stands in for RDS Proxy: PostgreSQL's SSLRequest, a TLS handshake with a certificate for
`localhost` from a CA of the test's own (which SSL_CERT_FILE names as the system's roots), then a
login that trusts. The client side is the real libpq and OpenSSL of psycopg's binary wheel.
"""

from __future__ import annotations

import datetime
import re
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

pytestmark = pytest.mark.integration


def _certificate(
    subject: str, issuer_key: ec.EllipticCurvePrivateKey | None, issuer: x509.Name | None
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and its certificate: a CA's (no issuer) or a server's for the DNS name `subject`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
    return key, builder.sign(issuer_key or key, hashes.SHA256())


def _pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


def _serve(listener: socket.socket, context: ssl.SSLContext) -> None:
    """Answer like a proxy that requires TLS: SSLRequest, the handshake, then a trusting login."""
    while True:
        try:
            raw, _ = listener.accept()
        except OSError:
            return
        with raw:
            try:
                length, code = struct.unpack("!ii", raw.recv(8))
                if code == _GSSENC_REQUEST:  # no GSS encryption here: the client goes on to TLS
                    raw.sendall(b"N")
                    length, code = struct.unpack("!ii", raw.recv(8))
                if code != _SSL_REQUEST:
                    continue
                raw.sendall(b"S")
                with context.wrap_socket(raw, server_side=True) as tls:
                    (length,) = struct.unpack("!i", tls.recv(4))
                    tls.recv(length - 4)  # the startup message
                    tls.sendall(struct.pack("!cii", b"R", 8, 0))  # AuthenticationOk
                    for name, value in ((b"server_version", b"16.11"), (b"client_encoding", b"UTF8")):
                        body = name + b"\0" + value + b"\0"
                        tls.sendall(struct.pack("!ci", b"S", 4 + len(body)) + body)
                    tls.sendall(struct.pack("!cic", b"Z", 5, b"I"))  # ReadyForQuery
                    tls.recv(5)  # Terminate, or the close
            except (OSError, ssl.SSLError, struct.error):
                continue  # a client that refused the certificate


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A stand-in for RDS Proxy on 127.0.0.1 (TLS required, a certificate for `localhost` from a CA
    of the test's own): its port and the CA's file."""
    folder = tmp_path_factory.mktemp("tls")
    ca_key, ca = _certificate("user-memory test root", None, None)
    key, cert = _certificate("localhost", ca_key, ca.subject)
    ca_file = _pem(folder / "ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    cert_file = _pem(folder / "server.crt", cert.public_bytes(serialization.Encoding.PEM))
    key_file = _pem(
        folder / "server.key",
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=_serve, args=(listener, context), daemon=True)
    thread.start()
    try:
        yield str(listener.getsockname()[1]), ca_file
    finally:
        listener.close()
        thread.join(timeout=5)


def _stack_tls() -> str:
    """The query string every DSN of infra/database.yaml ends with (its TLS settings)."""
    stack = (Path(__file__).resolve().parents[2] / "infra/database.yaml").read_text()
    (query,) = set(re.findall(r"@\$\{Endpoint\}:5432/\$\{DatabaseName\}\?([^\"]+)\"", stack))
    return query


def _connect(port: str, host: str = "localhost") -> psycopg.Connection:
    """Connect as a function does: a DSN with the stack's TLS settings (the proxy's host and port here)."""
    return psycopg.connect(f"postgresql://postgres@{host}:{port}/postgres?{_stack_tls()}", connect_timeout=10)


def test_the_dsns_tls_settings_trust_the_roots_ssl_cert_file_names(tls_server, monkeypatch):
    port, ca_file = tls_server
    # Given the roots SSL_CERT_FILE names (the template sets the runtime's bundle)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    # When the driver connects as the DSNs ask
    with _connect(port) as conn:
        # Then it is connected over TLS, the certificate and its name checked against those roots
        assert conn.pgconn.ssl_in_use
        assert conn.info.parameter_status("server_version") == "16.11"


def test_the_dsns_tls_settings_refuse_a_certificate_for_another_name(tls_server, monkeypatch):
    port, ca_file = tls_server
    # Given the same roots, and the server's certificate naming localhost
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    # When the driver reaches it by another name
    # Then verify-full refuses it
    with pytest.raises(psycopg.OperationalError, match="does not match host name"):
        _connect(port, host="127.0.0.1")


def test_the_dsns_tls_settings_refuse_a_certificate_outside_the_roots(tls_server, monkeypatch, tmp_path):
    port, _ = tls_server
    # Given roots that do not hold the server's CA (another test root)
    _, other = _certificate("another root", None, None)
    monkeypatch.setenv(
        "SSL_CERT_FILE", str(_pem(tmp_path / "other.pem", other.public_bytes(serialization.Encoding.PEM)))
    )
    # When the driver connects
    # Then the certificate is refused
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        _connect(port)
