"""Operations: health, reflection, auth, TLS and mTLS, unix sockets, metrics, settings, drain."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import urllib.request
from dataclasses import fields
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from trajgrade import _core
from trajgrade.commands import health as health_command
from trajgrade.server.settings import Settings, SettingsError
from trajgrade.v1 import grader_service_pb2 as g

from .server_harness import Case, GatedGrader, ServerFactory, request_for, status_of

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

# --- health and reflection -------------------------------------------------------------------


async def test_health_serving_after_start_for_server_and_service(
    make_server: ServerFactory,
) -> None:
    server = await make_server()
    stub = health_pb2_grpc.HealthStub(server.channel)
    for name in ("", "trajgrade.v1.GraderService"):
        response = await stub.Check(health_pb2.HealthCheckRequest(service=name))
        assert response.status == SERVING


async def test_reflection_lists_grader_and_health(make_server: ServerFactory) -> None:
    server = await make_server()
    stub = reflection_pb2_grpc.ServerReflectionStub(server.channel)
    call = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = set()
    async for response in call:
        names = {s.name for s in response.list_services_response.service}
    assert {"trajgrade.v1.GraderService", "grpc.health.v1.Health"} <= names


async def test_reflection_serves_the_descriptors(make_server: ServerFactory) -> None:
    """What grpcurl needs to call the service with no proto files."""
    server = await make_server()
    stub = reflection_pb2_grpc.ServerReflectionStub(server.channel)
    request = reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="trajgrade.v1.GraderService"
    )
    async for response in stub.ServerReflectionInfo(iter([request])):
        assert response.file_descriptor_response.file_descriptor_proto


# --- drain -----------------------------------------------------------------------------------


async def test_drain_finishes_queued_work_refuses_new_and_goes_not_serving(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=1)
    health = health_pb2_grpc.HealthStub(server.channel)
    gated.gate.clear()
    accepted = [asyncio.create_task(server.grade(request_for(c))) for c in valid_cases[:12]]
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    await asyncio.sleep(0.1)  # every call is queued or in the core now
    drain = asyncio.create_task(server.server.shutdown(grace=10))
    await asyncio.sleep(0.1)
    response = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert response.status == NOT_SERVING
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(request_for(valid_cases[0]))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    gated.gate.set()
    assert await drain is True
    for task, case in zip(accepted, valid_cases[:12], strict=True):
        (expected,) = reference.grade_requests([request_for(case).SerializeToString()])
        assert await task == expected


# --- auth ------------------------------------------------------------------------------------


async def test_bearer_token_required_except_for_health(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    server = await make_server(auth_token="s3cret-token")
    request = request_for(valid_cases[0])
    for metadata in [
        (),
        (("authorization", "Bearer wrong"),),
        (("authorization", "s3cret-token"),),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.grade(request, metadata=metadata)
        code, info = status_of(err.value)
        assert (code, info.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    answer = await server.grade(request, metadata=(("authorization", "Bearer s3cret-token"),))
    assert g.GradeTraceResponse.FromString(answer).result.trace_id == valid_cases[0].trace.id

    async def one():  # type: ignore[no-untyped-def]
        yield g.StreamGradeTracesRequest(trace=valid_cases[0].trace, suite=valid_cases[0].suite)

    with pytest.raises(grpc.aio.AioRpcError) as err:
        _ = [r async for r in server.stub.StreamGradeTraces(one())]
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    health = health_pb2_grpc.HealthStub(server.channel)
    assert (await health.Check(health_pb2.HealthCheckRequest())).status == SERVING


async def test_auth_token_file(
    make_server: ServerFactory, tmp_path: Path, valid_cases: list[Case]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    server = await make_server(auth_token_file=str(token_file))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.grade(request_for(valid_cases[0]))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    await server.grade(
        request_for(valid_cases[0]), metadata=(("authorization", "Bearer from-a-file"),)
    )


# --- TLS -------------------------------------------------------------------------------------


class Pki:
    """A throwaway CA with a server certificate for 127.0.0.1/localhost and a client cert."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trajgrade test CA")])
        self.ca_cert = (
            self._builder(name, name, self.ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca = self._write("ca.pem", self.ca_cert.public_bytes(serialization.Encoding.PEM))
        self.server_cert, self.server_key = self._leaf(
            "server",
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
        )
        self.client_cert, self.client_key = self._leaf(
            "client", x509.SubjectAlternativeName([x509.DNSName("client")])
        )

    @staticmethod
    def _builder(subject: x509.Name, issuer: x509.Name, key: object) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key)  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
        )

    def _leaf(self, cn: str, san: x509.SubjectAlternativeName) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        cert = (
            self._builder(subject, self.ca_cert.subject, key.public_key())
            .add_extension(san, critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return (
            self._write(f"{cn}.pem", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(f"{cn}-key.pem", key_pem),
        )

    def _write(self, name: str, data: bytes) -> str:
        path = self.dir / name
        path.write_bytes(data)
        return str(path)

    def channel_credentials(self, *, client_cert: bool) -> grpc.ChannelCredentials:
        read = lambda p: Path(p).read_bytes()  # noqa: E731
        if client_cert:
            return grpc.ssl_channel_credentials(
                read(self.ca), read(self.client_key), read(self.client_cert)
            )
        return grpc.ssl_channel_credentials(read(self.ca))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


async def test_tls_handshake_and_plaintext_refused(
    make_server: ServerFactory, pki: Pki, valid_cases: list[Case]
) -> None:
    server = await make_server(
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        credentials=pki.channel_credentials(client_cert=False),
    )
    answer = await server.grade(request_for(valid_cases[0]))
    assert g.GradeTraceResponse.FromString(answer).result.trace_id == valid_cases[0].trace.id
    async with grpc.aio.insecure_channel(server.target) as plain:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.raw_unary("GradeTrace", plain)(
                request_for(valid_cases[0]).SerializeToString(), timeout=3
            )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    status = await asyncio.to_thread(health_command.check, server.target, tls_ca_file=pki.ca)
    assert status == "SERVING"


async def test_mutual_tls_requires_a_client_certificate(
    make_server: ServerFactory, pki: Pki, valid_cases: list[Case]
) -> None:
    server = await make_server(
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca,
        credentials=pki.channel_credentials(client_cert=True),
    )
    await server.grade(request_for(valid_cases[0]))
    async with grpc.aio.secure_channel(
        server.target, pki.channel_credentials(client_cert=False)
    ) as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.raw_unary("GradeTrace", anonymous)(
                request_for(valid_cases[0]).SerializeToString(), timeout=3
            )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    status = await asyncio.to_thread(
        health_command.check,
        server.target,
        tls_ca_file=pki.ca,
        tls_cert_file=pki.client_cert,
        tls_key_file=pki.client_key,
    )
    assert status == "SERVING"


# --- unix sockets ----------------------------------------------------------------------------


async def test_unix_socket_serves_grading_and_health(
    make_server: ServerFactory, tmp_path: Path, valid_cases: list[Case], reference: _core.Grader
) -> None:
    socket = tmp_path / "trajgrade.sock"
    server = await make_server(listen=(f"unix:{socket}",))
    assert socket.exists()
    request = request_for(valid_cases[4])
    (expected,) = reference.grade_requests([request.SerializeToString()])
    assert await server.grade(request) == expected
    assert await asyncio.to_thread(health_command.check, f"unix:{socket}") == "SERVING"


# --- the health command ----------------------------------------------------------------------


async def test_health_command_exit_codes(make_server: ServerFactory) -> None:
    server = await make_server()
    parser = argparse.ArgumentParser()
    health_command.register(parser.add_subparsers())
    args = parser.parse_args(["health", "--address", server.target, "--quiet"])
    assert await asyncio.to_thread(args.func, args) == 0
    args = parser.parse_args(["health", "--address", server.target, "--service", "nope", "--quiet"])
    assert await asyncio.to_thread(args.func, args) == 1  # unknown service: NOT_FOUND
    await server.server.shutdown(grace=0)
    args = parser.parse_args(["health", "--address", server.target, "--timeout", "1", "--quiet"])
    assert await asyncio.to_thread(args.func, args) == 1


def test_health_command_dials_loopback_for_wildcard_listen() -> None:
    assert health_command.dial_address("0.0.0.0:7000") == "127.0.0.1:7000"
    assert health_command.dial_address("[::]:7000") == "[::1]:7000"
    assert health_command.dial_address("unix:/run/t.sock") == "unix:/run/t.sock"
    assert health_command.dial_address("127.0.0.1:1") == "127.0.0.1:1"


# --- metrics ---------------------------------------------------------------------------------


async def test_metrics_endpoint_counts_requests_batches_and_latency(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    server = await make_server(metrics_port=0)
    assert server.server.metrics_port
    await asyncio.gather(*(server.grade(request_for(c)) for c in valid_cases[:10]))
    with pytest.raises(grpc.aio.AioRpcError):
        await server.stub.GetSuite(g.GetSuiteRequest(suite_id="s1-missing"))
    url = f"http://127.0.0.1:{server.server.metrics_port}/metrics"
    text = (await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())).decode()
    assert 'trajgrade_requests_total{code="OK",rpc="GradeTrace"} 10.0' in text
    assert 'trajgrade_requests_total{code="NOT_FOUND",rpc="GetSuite"} 1.0' in text
    assert "trajgrade_batch_size_count" in text
    assert "trajgrade_grading_seconds_bucket" in text
    assert "trajgrade_queue_depth 0.0" in text
    assert 'trajgrade_rpc_latency_seconds_count{rpc="GradeTrace"} 10.0' in text


# --- settings --------------------------------------------------------------------------------


def test_settings_defaults_env_and_flags() -> None:
    default = Settings.from_sources(environ={})
    assert default.listen == ("127.0.0.1:50051",)  # loopback unless told otherwise
    assert default.workers == 1 and default.batching
    env = {"TRAJGRADE_MAX_BATCH_SIZE": "7", "TRAJGRADE_LISTEN": "127.0.0.1:1,unix:/tmp/x.sock"}
    from_env = Settings.from_sources(environ=env)
    assert from_env.max_batch_size == 7
    assert from_env.listen == ("127.0.0.1:1", "unix:/tmp/x.sock")
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    args = parser.parse_args(["--max-batch-size", "9", "--no-batching", "--listen", "127.0.0.1:2"])
    flagged = Settings.from_namespace(args, environ=env)
    assert flagged.max_batch_size == 9  # flags win over env
    assert flagged.effective_batch_size == 1
    assert flagged.listen == ("127.0.0.1:2",)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"tls_cert_file": "x"}, "tls_key_file"),
        ({"tls_client_ca_file": "x"}, "mTLS"),
        ({"workers": 2, "listen": ("unix:/tmp/s",)}, "workers"),
        ({"workers": 2, "listen": ("127.0.0.1:0",)}, "workers"),
        ({"log_format": "xml"}, "log_format"),
    ],
)
def test_settings_reject_impossible_values(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_sources(environ={}, overrides=overrides)


def test_settings_env_parse_error_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="TRAJGRADE_WORKERS"):
        Settings.from_sources(environ={"TRAJGRADE_WORKERS": "many"})


def test_settings_mask_the_token_in_logs() -> None:
    settings = Settings.from_sources(environ={"TRAJGRADE_AUTH_TOKEN": "hunter2"})
    assert settings.describe()["auth_token"] == "***"
    assert "hunter2" not in repr(settings.describe())
    assert "hunter2" not in repr(settings)


def test_every_setting_is_in_the_docs_settings_table() -> None:
    """docs/server.md lists each flag with its env var (new settings must not go undocumented)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text()
    rows = {line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| `--")}
    missing = [f.name for f in fields(Settings) if f"`{Settings.env_var(f.name)}`" not in rows]
    assert not missing, missing
