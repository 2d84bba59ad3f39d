"""`trajgrade health`: a container health check; exit 0 iff the server answers SERVING."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from trajgrade.server.settings import DEFAULT_LISTEN, ENV_PREFIX

_WILDCARDS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}


def default_address() -> str:
    """The first TRAJGRADE_LISTEN address (the one the server in this container uses)."""
    listen = os.environ.get(ENV_PREFIX + "LISTEN", "")
    first = listen.split(",")[0].strip()
    return first or DEFAULT_LISTEN


def dial_address(address: str) -> str:
    """Where to connect for a listen address: a wildcard host means this machine."""
    if address.startswith("unix:"):
        return address
    host, sep, port = address.rpartition(":")
    if sep and host in _WILDCARDS:
        return f"{_WILDCARDS[host]}:{port}"
    return address


def register(subparsers: Any) -> None:
    """Add the `health` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "health",
        help="check a server's grpc.health.v1 status (exit 0 iff SERVING)",
        description="Ask a trajgrade server for its health. Exit 0 iff SERVING, 1 otherwise "
        "(NOT_SERVING, unknown service, unreachable, timeout).",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="host:port or unix:/path (default: first TRAJGRADE_LISTEN address, else "
        f"{DEFAULT_LISTEN}; a wildcard host is checked on loopback)",
    )
    parser.add_argument(
        "--service",
        default="",
        help="service to ask about ('' = the whole server, or trajgrade.v1.GraderService)",
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    parser.add_argument(
        "--tls-ca-file",
        default=os.environ.get(ENV_PREFIX + "HEALTH_TLS_CA_FILE"),
        help="PEM CA to verify the server with (enables TLS)",
    )
    parser.add_argument("--tls-cert-file", default=None, help="client certificate (mTLS)")
    parser.add_argument("--tls-key-file", default=None, help="client private key (mTLS)")
    parser.add_argument(
        "--tls-server-name", default=None, help="name to verify in the server certificate"
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing; use the exit code")
    parser.set_defaults(func=run)


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as handle:
        return handle.read()


def check(
    address: str,
    *,
    service: str = "",
    timeout: float = 3.0,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    tls_server_name: str | None = None,
) -> str:
    """The health status name (SERVING, NOT_SERVING, ...) or raise grpc.RpcError."""
    options: list[tuple[str, Any]] = []
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    target = dial_address(address)
    if tls_ca_file or tls_cert_file:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca_file),
            private_key=_read(tls_key_file),
            certificate_chain=_read(tls_cert_file),
        )
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))


def run(args: argparse.Namespace) -> int:
    """Exit 0 iff SERVING."""
    address = args.address or default_address()
    try:
        status = check(
            address,
            service=args.service,
            timeout=args.timeout,
            tls_ca_file=args.tls_ca_file,
            tls_cert_file=args.tls_cert_file,
            tls_key_file=args.tls_key_file,
            tls_server_name=args.tls_server_name,
        )
    except grpc.RpcError as exc:
        if not args.quiet:
            code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            print(f"{address}: {code}: {details}", file=sys.stderr)
        return 1
    except OSError as exc:
        if not args.quiet:
            print(f"trajgrade health: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"{address}: {status}")
    return 0 if status == "SERVING" else 1
