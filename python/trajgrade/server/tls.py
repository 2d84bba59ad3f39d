"""The server's TLS settings, read once per use: as grpc.aio's credentials, and as the PEM
bytes the core's transports (the front, the OTLP/gRPC receiver) take."""

from __future__ import annotations

from pathlib import Path

import grpc

from trajgrade.server.settings import Settings

# Certificate chain, private key, and the client CA (mutual TLS) or None.
Pem = tuple[bytes, bytes, bytes | None]


def server_pem(settings: Settings) -> Pem | None:
    """The server's certificate, key and client CA as PEM bytes (None: plaintext)."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    ca = settings.tls_client_ca_file
    return (
        Path(settings.tls_cert_file).read_bytes(),
        Path(settings.tls_key_file).read_bytes(),
        None if ca is None else Path(ca).read_bytes(),
    )


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials (mutual when a client CA is set), or None for plaintext."""
    pem = server_pem(settings)
    if pem is None:
        return None
    cert, key, client_ca = pem
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )
