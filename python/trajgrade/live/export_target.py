"""Where and how write-back connects: the --otlp-export-* settings resolved into one target
(protocol, address, TLS, headers), following the OTel SDK exporters' rules so that what an SRE
sets for them means the same here. Pure parsing: the settings validate with it at startup.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

GRPC = "grpc"
HTTP_PROTOBUF = "http/protobuf"
PROTOCOLS = (GRPC, HTTP_PROTOBUF)
# OTEL_EXPORTER_OTLP_COMPRESSION's values.
NONE, GZIP = "none", "gzip"
COMPRESSIONS = (NONE, GZIP)
LOGS_PATH = "/v1/logs"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# An HTTP field name (RFC 9110 token); gRPC metadata keys are its lowercase subset.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True)
class ExportTarget:
    """A resolved write-back endpoint."""

    protocol: str  # GRPC or HTTP_PROTOBUF
    # gRPC: the channel target (host:port, unix:/path, ...); HTTP: the full URL of /v1/logs.
    address: str
    tls: bool
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    # Out of repr(): header values are often tokens.
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    compression: str = NONE  # or GZIP: each export body gzip-compressed

    def describe(self) -> str:
        """For logs: protocol, security and address (never the headers: they carry tokens)."""
        name = "OTLP/gRPC" if self.protocol == GRPC else "OTLP/HTTP"
        security = "mTLS" if self.cert_file else "TLS" if self.tls else "plaintext"
        gzip = ", gzip" if self.compression == GZIP else ""
        return f"{name} ({security}{gzip}) to {self.address}"


def parse_target(
    endpoint: str,
    protocol: str | None = None,
    *,
    insecure: bool = False,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    compression: str = NONE,
) -> ExportTarget:
    """Resolve the write-back settings (ValueError names what is wrong).

    Protocol: `protocol` when given, else http/protobuf for an http:// or https:// endpoint and
    grpc for grpc:// or a bare address. Security: https:// is TLS and http:// plaintext; any
    other gRPC endpoint is TLS unless `insecure` (OTEL_EXPORTER_OTLP_INSECURE's rule).
    """
    endpoint = endpoint.strip()
    match = _SCHEME.match(endpoint)
    scheme = match.group(1).lower() if match else ""
    if scheme not in ("", "grpc", "http", "https"):
        raise ValueError(f"endpoint {endpoint!r}: the scheme must be grpc, http or https")
    if protocol is None:
        protocol = HTTP_PROTOBUF if scheme in ("http", "https") else GRPC
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be grpc or http/protobuf, got {protocol!r}")
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be none or gzip, got {compression!r}")
    if insecure and scheme == "https":
        raise ValueError(f"endpoint {endpoint!r} is https://: TLS, yet insecure is set")
    if (cert_file is None) != (key_file is None):
        raise ValueError("the client certificate and its key go together")
    if protocol == GRPC:
        target = _grpc_target(endpoint, scheme)
        tls = scheme == "https" or (scheme != "http" and not insecure)
    else:
        if scheme not in ("http", "https"):
            raise ValueError(f"OTLP/HTTP needs an http:// or https:// endpoint, got {endpoint!r}")
        target = _logs_url(endpoint)
        tls = scheme == "https"
    if not tls and (ca_file or cert_file):
        raise ValueError(
            f"a CA or client certificate is set, but {endpoint!r} is plaintext "
            "(http://, or insecure for a gRPC endpoint)"
        )
    return ExportTarget(protocol, target, tls, ca_file, cert_file, key_file, headers, compression)


def _grpc_target(endpoint: str, scheme: str) -> str:
    if not scheme:
        return endpoint  # host:port, or a gRPC target such as unix:/path
    parts = urllib.parse.urlsplit(endpoint)
    if parts.path not in ("", "/") or parts.query or not parts.netloc:
        raise ValueError(f"a gRPC endpoint is host:port without a path, got {endpoint!r}")
    return parts.netloc


def _logs_url(endpoint: str) -> str:
    """The base URL with /v1/logs appended (OTEL_EXPORTER_OTLP_ENDPOINT's rule), unless it
    already ends with it (a signal-specific URL, as OTEL_EXPORTER_OTLP_LOGS_ENDPOINT)."""
    parts = urllib.parse.urlsplit(endpoint)
    if not parts.hostname:
        raise ValueError(f"endpoint {endpoint!r} has no host")
    path = parts.path.rstrip("/")
    if not path.endswith(LOGS_PATH):
        path += LOGS_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def header(text: str) -> tuple[str, str]:
    """One `key=value` header as given on the command line (the value taken as written)."""
    key, sep, value = text.partition("=")
    return _checked(key.strip(), sep, value.strip())


def parse_headers(text: str) -> tuple[tuple[str, str], ...]:
    """Headers in OTEL_EXPORTER_OTLP_HEADERS' format: `k1=v1,k2=v2`, percent-encoded."""
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = urllib.parse.unquote(key).strip()
        out.append(_checked(key, sep, urllib.parse.unquote(value).strip()))
    return tuple(out)


def _checked(key: str, sep: str, value: str) -> tuple[str, str]:
    # The message never quotes what was given: a header value is often a token.
    if not sep:
        raise ValueError("expected headers as key=value (an item has no '=')")
    if not _HEADER_NAME.match(key):
        raise ValueError(f"header name {key!r} is not a valid HTTP field name")
    # gRPC metadata keys are lowercase; HTTP field names are case-insensitive.
    return key.lower(), value
