"""Server settings: one dataclass, filled from defaults, TRAJGRADE_* env vars, then flags."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from trajgrade.live.export_target import ExportTarget, header, parse_headers, parse_target

ENV_PREFIX = "TRAJGRADE_"
DEFAULT_LISTEN = "127.0.0.1:50051"
# The OTLP receiver's loopback addresses when its flag is given alone (or as "default").
DEFAULT_OTLP_GRPC = "127.0.0.1:4317"
DEFAULT_OTLP_HTTP = "127.0.0.1:4318"
# Flags that take an optional value: given alone they mean "on, at the default address".
_OPTIONAL_VALUE = {"otlp_grpc": "default", "otlp_http": "default"}
_CAP_POLICIES = ("grade", "refuse")
KIB = 1024
MIB = 1024 * KIB


def _resolve(value: str | None, default: str) -> str | None:
    if value is None:
        return None
    return default if value.strip() in ("", "default") else value.strip()


class SettingsError(ValueError):
    """A setting has an invalid value (reported to the operator, never to a client)."""


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected a boolean (true/false), got {text!r}")


def _addresses(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _opt_int(text: str) -> int | None:
    return None if text.strip() == "" else int(text)


def _opt_float(text: str) -> float | None:
    return None if text.strip() == "" else float(text)


def _opt_str(text: str) -> str | None:
    return None if text == "" else text


def _given_str(text: str) -> str:
    # Unlike _opt_str, "" stays "": for the token settings an explicitly empty value is a
    # misconfiguration to report, not "unset" (which would silently turn authentication off).
    return text


def _setting(
    default: Any,
    help: str,
    parse: Callable[[str], Any],
    *,
    secret: bool = False,
) -> Any:
    return field(
        default=default,
        repr=not secret,  # a token must not reach logs or tracebacks through repr()
        metadata={"help": help, "parse": parse, "secret": secret},
    )


@dataclass(frozen=True)
class Settings:
    """Everything `trajgrade serve` can be told; each field is flag --x-y and env TRAJGRADE_X_Y."""

    # Network.
    listen: tuple[str, ...] = _setting(
        (DEFAULT_LISTEN,),
        "address to serve on: host:port, [v6]:port or unix:/path (repeat or comma-separate); "
        "loopback only unless you say otherwise",
        _addresses,
    )
    workers: int = _setting(1, "server processes sharing the TCP port (SO_REUSEPORT)", int)
    max_message_bytes: int = _setting(
        64 * MIB, "largest gRPC message accepted or sent, in bytes", int
    )
    max_concurrent_rpcs: int | None = _setting(
        None,
        "GraderService calls handled at once per worker; more are answered RESOURCE_EXHAUSTED "
        "(TOO_MANY_RPCS, with retry-after) (unset: no cap)",
        _opt_int,
    )
    max_pending_rpcs: int = _setting(
        16_384,
        "calls gRPC holds before the server takes them (its pending-request backlog); past it "
        "gRPC cancels calls unseen, so keep it above the largest burst (at least max_queue_size)",
        int,
    )
    retry_after_ms: int = _setting(
        100,
        "retry-after sent with RESOURCE_EXHAUSTED for a full queue or too many calls",
        int,
    )
    # Batching.
    batching: bool = _setting(True, "coalesce unary requests into core batches", _bool)
    max_batch_size: int = _setting(64, "flush a batch at this many items", int)
    max_batch_delay_us: int = _setting(
        500, "flush a batch this many microseconds after its first item", int
    )
    max_queue_size: int = _setting(
        4096, "items waiting for grading before RESOURCE_EXHAUSTED (per worker)", int
    )
    max_queue_bytes: int = _setting(
        512 * MIB, "request bytes waiting for grading before RESOURCE_EXHAUSTED", int
    )
    stream_window: int = _setting(
        256,
        "traces of one StreamGradeTraces call in flight before reading pauses (the next "
        "message is still read while only one is in flight)",
        int,
    )
    executor_threads: int = _setting(
        2, "Python threads handing batches to the core (parallelism is in the core)", int
    )
    grade_threads: int = _setting(0, "core grading threads per worker (0: one per core)", int)
    inline_grade_bytes: int = _setting(
        256 * KIB,
        "a unary batch of at most this many request bytes is graded on the event loop thread, "
        "not handed to the pool (0: never)",
        int,
    )
    inline_work_units: int = _setting(
        100_000,
        "work units each inline-graded item (or trace of an inline live trip) may spend; one "
        "that needs more is graded again in the pool with max_work_units (bounds how long the "
        "event loop is busy grading)",
        int,
    )
    # Core limits (SPEC section 7); defaults match docs/internals/core-api.md.
    max_trace_bytes: int = _setting(4 * MIB, "largest encoded trace", int)
    max_calls_per_trace: int = _setting(10_000, "most tool calls in one trace", int)
    max_argument_bytes: int = _setting(MIB, "largest arguments_json / args_json text", int)
    max_json_depth: int = _setting(128, "deepest JSON nesting accepted", int)
    max_regex_bytes: int = _setting(MIB, "largest compiled regex program", int)
    max_assertions_per_suite: int = _setting(1_000, "most assertions in one suite", int)
    max_suite_bytes: int = _setting(4 * MIB, "largest encoded suite", int)
    suite_cache_size: int = _setting(1_024, "inline suites kept compiled in memory (LRU)", int)
    max_registered_suites: int = _setting(
        10_000, "registered suites kept (LRU, apart from inline suites)", int
    )
    max_batch_items: int = _setting(
        10_000, "most traces in one BatchGradeTraces call or one StreamGradeTraces chunk", int
    )
    max_work_units: int = _setting(
        50_000_000,
        "work units grading one trace may spend (about one per argument comparison, matching "
        "edge or call scanned); more is that trace's WORK_LIMIT_EXCEEDED error",
        int,
    )
    expression_cost_limit: int = _setting(
        1_000_000,
        "cost units one CEL evaluation may spend (one per comprehension iteration and function "
        "call); more is EXPRESSION_ERROR 'cost limit of N exceeded'",
        int,
    )
    # Lifecycle.
    grace_period_s: float = _setting(
        20.0, "seconds that queued and in-flight work gets to finish on SIGTERM", float
    )
    # Security.
    tls_cert_file: str | None = _setting(
        None, "PEM server certificate chain (enables TLS)", _opt_str
    )
    tls_key_file: str | None = _setting(None, "PEM private key of the server certificate", _opt_str)
    tls_client_ca_file: str | None = _setting(
        None,
        "PEM CA bundle; when set, clients must present a certificate it signed (mTLS)",
        _opt_str,
    )
    auth_token: str | None = _setting(
        None,
        "require 'authorization: Bearer <token>' on every RPC except health (prefer the env var "
        "or --auth-token-file: flags show in ps)",
        _given_str,
        secret=True,
    )
    auth_token_file: str | None = _setting(None, "file holding the bearer token", _given_str)
    reflection: bool = _setting(
        True, "serve gRPC server reflection (grpcurl without protos)", _bool
    )
    # Live grading (docs/live-grading.md).
    otlp_grpc: str | None = _setting(
        None,
        "receive OTLP/gRPC (TraceService, LogsService) on this address: host:port or "
        f"unix:/path; the flag alone or 'default' is {DEFAULT_OTLP_GRPC} (off when unset)",
        _opt_str,
    )
    otlp_http: str | None = _setting(
        None,
        "receive OTLP/HTTP (POST /v1/traces, /v1/logs) on this address: host:port or "
        f"unix:/path; the flag alone or 'default' is {DEFAULT_OTLP_HTTP} (off when unset)",
        _opt_str,
    )
    otlp_max_message_bytes: int = _setting(
        4 * MIB,
        "largest OTLP export accepted (gRPC message or inflated HTTP body), in bytes; as the "
        "OpenTelemetry Collector's receiver, 4 MiB: bounds what one export holds the intake",
        int,
    )
    routes: str | None = _setting(
        None,
        "YAML routes file: which suites grade which received traces (reloaded on SIGHUP and on "
        "change); needed with --otlp-grpc / --otlp-http",
        _opt_str,
    )
    routes_poll_s: float = _setting(2.0, "seconds between checks of the routes file", float)
    results_jsonl: str | None = _setting(
        None,
        "append every live result to this JSONL file (regrade rows), rotated by size",
        _opt_str,
    )
    results_jsonl_max_bytes: int = _setting(
        256 * MIB, "rotate the results file once it holds this many bytes", int
    )
    results_jsonl_keep: int = _setting(10, "rotated results files kept (oldest deleted)", int)
    otlp_export_endpoint: str | None = _setting(
        None,
        "send every live result to this OTLP logs endpoint as gen_ai.evaluation.result log "
        "records, one per assertion: host:port or grpc://host:port (OTLP/gRPC), "
        "http://host:port or https://host:port[/path] (OTLP/HTTP, POST .../v1/logs)",
        _opt_str,
    )
    otlp_export_protocol: str | None = _setting(
        None,
        "write-back protocol, grpc or http/protobuf (as OTEL_EXPORTER_OTLP_PROTOCOL); unset: "
        "http/protobuf for an http:// or https:// endpoint, grpc otherwise",
        _opt_str,
    )
    otlp_export_compression: str = _setting(
        "none",
        "compress each write-back export: gzip or none (as OTEL_EXPORTER_OTLP_COMPRESSION; "
        "gRPC's grpc-encoding, HTTP's Content-Encoding)",
        str,
    )
    otlp_export_insecure: bool = _setting(
        False,
        "plaintext gRPC write-back to an endpoint without http:// or https:// (as "
        "OTEL_EXPORTER_OTLP_INSECURE; http:// is plaintext, https:// TLS, whatever this says)",
        _bool,
    )
    otlp_export_ca: str | None = _setting(
        None,
        "PEM CA bundle to verify the write-back endpoint's certificate (unset: system roots)",
        _opt_str,
    )
    otlp_export_cert: str | None = _setting(
        None, "PEM client certificate chain presented to the write-back endpoint (mTLS)", _opt_str
    )
    otlp_export_key: str | None = _setting(None, "PEM private key of --otlp-export-cert", _opt_str)
    otlp_export_header: tuple[tuple[str, str], ...] = _setting(
        (),
        "header sent with every write-back export, key=value (repeat the flag; the env var "
        "takes OTEL_EXPORTER_OTLP_HEADERS' format: k1=v1,k2=v2, percent-encoded), e.g. "
        "authorization=Bearer <token> (prefer the env var: flags show in ps)",
        parse_headers,
        secret=True,
    )
    live_group_by: str | None = _setting(
        None,
        "assemble runs by this span or resource attribute (e.g. session.id) instead of the "
        "trace id",
        _opt_str,
    )
    live_settle_s: float = _setting(
        2.0, "a run is complete this long after its root span ended with no new span", float
    )
    live_idle_timeout_s: float = _setting(
        300.0, "a run with no new span for this long is graded as cut off", float
    )
    live_max_open_traces: int = _setting(10_000, "runs being assembled at once", int)
    live_max_spans_per_trace: int = _setting(
        10_000, "spans held for one run; more are refused and the run is marked cut off", int
    )
    live_max_bytes: int = _setting(256 * MIB, "span bytes held across all open runs", int)
    live_on_cap: str = _setting(
        "grade",
        "at the open-runs or bytes cap: grade (the oldest open run, as cut off) or refuse "
        "(the new spans, as an OTLP partial success)",
        str,
    )
    live_late_window_s: float | None = _setting(
        None,
        "graded run ids are remembered this long after their last span to recognise late "
        "spans (default: 3 x live_idle_timeout_s); a span of a run forgotten since starts a "
        "new run",
        _opt_float,
    )
    live_late_memory: int = _setting(
        20_000,
        "at most this many graded run ids remembered (the oldest forgotten first)",
        int,
    )
    watch_queue_size: int = _setting(
        1_024, "results buffered per WatchResults caller; a caller that falls behind is cut", int
    )
    core_front: bool = _setting(
        True,
        "with live grading on, serve the TCP addresses on the core's transport: WatchResults "
        "streams written off the event loop, every other call passed to the grpc.aio server "
        "on a private unix socket (false: grpc.aio serves the addresses itself)",
        _bool,
    )
    early_verdicts: bool = _setting(
        False,
        "report an assertion that fails before its run ends (forbidden or unexpected tool, "
        "over a max count, budget or time) at once on WatchResults, marked early; the final "
        "result still comes at completion and is the one counted",
        _bool,
    )
    live_early_max_spans: int = _setting(
        1_000, "open runs with more spans than this get no early checks (bounds their cost)", int
    )
    live_early_interval_ms: int = _setting(
        100,
        "an open run is checked for early verdicts at most once per this many ms (spans that "
        "arrive sooner wait for the next check); 0: at every export that adds to it",
        int,
    )
    # Observability.
    metrics_port: int | None = _setting(
        None, "serve Prometheus metrics over HTTP on this port (worker i uses port+i)", _opt_int
    )
    metrics_host: str = _setting("127.0.0.1", "address of the metrics HTTP listener", str)
    log_format: str = _setting("text", "log format: text or json", str)
    log_level: str = _setting("INFO", "log level: DEBUG, INFO, WARNING, ERROR", str)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:  # noqa: PLR0912 - one flat list of independent checks
        """Raise SettingsError naming the first setting with an impossible value."""
        positive = [
            "workers",
            "max_message_bytes",
            "max_batch_size",
            "max_queue_size",
            "max_queue_bytes",
            "max_pending_rpcs",
            "retry_after_ms",
            "stream_window",
            "executor_threads",
            "max_trace_bytes",
            "max_calls_per_trace",
            "max_argument_bytes",
            "max_json_depth",
            "max_regex_bytes",
            "max_assertions_per_suite",
            "max_suite_bytes",
            "suite_cache_size",
            "max_registered_suites",
            "max_batch_items",
            "max_work_units",
            "expression_cost_limit",
            "results_jsonl_max_bytes",
            "results_jsonl_keep",
            "live_max_open_traces",
            "live_max_spans_per_trace",
            "live_max_bytes",
            "otlp_max_message_bytes",
            "live_late_memory",
            "watch_queue_size",
            "live_early_max_spans",
        ]
        for name in positive:
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_concurrent_rpcs is not None and self.max_concurrent_rpcs < 1:
            raise SettingsError(
                f"max_concurrent_rpcs must be at least 1 (or unset), got {self.max_concurrent_rpcs}"
            )
        if self.max_pending_rpcs < self.max_queue_size:
            # A burst the queue could take would be cut (CANCELLED) by gRPC's backlog first,
            # before it ever reached the queue's RESOURCE_EXHAUSTED.
            raise SettingsError(
                f"max_pending_rpcs ({self.max_pending_rpcs}) must be at least max_queue_size "
                f"({self.max_queue_size})"
            )
        if self.max_batch_delay_us < 0:
            raise SettingsError("max_batch_delay_us must not be negative")
        if self.grade_threads < 0:
            raise SettingsError("grade_threads must not be negative")
        if self.inline_grade_bytes < 0:
            raise SettingsError("inline_grade_bytes must not be negative")
        if self.inline_work_units < 1:
            raise SettingsError("inline_work_units must be at least 1")
        if self.grace_period_s < 0:
            raise SettingsError("grace_period_s must not be negative")
        if self.live_early_interval_ms < 0:
            raise SettingsError("live_early_interval_ms must not be negative")
        if not self.listen:
            raise SettingsError("listen needs at least one address")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise SettingsError("tls_cert_file and tls_key_file go together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise SettingsError("tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file")
        if self.auth_token is not None and self.auth_token_file is not None:
            raise SettingsError("set auth_token or auth_token_file, not both")
        if self.auth_token is not None and not self.auth_token.strip():
            raise SettingsError(
                "auth_token (--auth-token / TRAJGRADE_AUTH_TOKEN) is set but empty: that would "
                "serve without authentication; set a token, or unset it to serve without one"
            )
        if self.auth_token_file is not None and not self.auth_token_file.strip():
            raise SettingsError(
                "auth_token_file (--auth-token-file / TRAJGRADE_AUTH_TOKEN_FILE) is set but "
                "empty: name the file that holds the token, or unset it"
            )
        if self.log_format not in {"text", "json"}:
            raise SettingsError(f"log_format must be text or json, got {self.log_format!r}")
        if self.workers > 1:
            for address in self.listen:
                if address.startswith("unix:") or address.endswith(":0"):
                    raise SettingsError(
                        f"workers > 1 needs fixed TCP ports to share; cannot share {address!r}"
                    )
        self._validate_live()
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise SettingsError(f"metrics_port out of range: {self.metrics_port}")

    def _validate_live(self) -> None:
        for name in ("live_settle_s", "live_idle_timeout_s", "live_late_window_s", "routes_poll_s"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be above 0, got {getattr(self, name)}")
        if self.live_on_cap not in _CAP_POLICIES:
            raise SettingsError(f"live_on_cap must be grade or refuse, got {self.live_on_cap!r}")
        if self.live_enabled and self.routes is None:
            raise SettingsError(
                "--otlp-grpc / --otlp-http need --routes FILE (which suites grade what arrives)"
            )
        if self.live_enabled and self.workers > 1:
            # Spans of one run must meet in one process: a shared port would scatter them.
            raise SettingsError("the OTLP receiver runs in one worker: use --workers 1")
        if self.results_jsonl is not None and not self.results_jsonl.lower().endswith(
            (".jsonl", ".ndjson")
        ):
            raise SettingsError(f"results_jsonl must end in .jsonl, got {self.results_jsonl!r}")
        if self.otlp_export_endpoint is not None:
            try:
                self.export_target()
            except ValueError as exc:
                raise SettingsError(f"otlp_export_*: {exc}") from exc
        else:
            given = [
                name
                for name in (
                    "otlp_export_protocol",
                    "otlp_export_ca",
                    "otlp_export_cert",
                    "otlp_export_key",
                )
                if getattr(self, name) is not None
            ]
            if self.otlp_export_compression != "none":
                given.append("otlp_export_compression")
            if self.otlp_export_insecure or self.otlp_export_header:
                given.append("otlp_export_insecure / otlp_export_header")
            if given:
                raise SettingsError(f"{', '.join(given)} need otlp_export_endpoint")

    @property
    def late_window_s(self) -> float:
        """How long graded run ids are remembered: the setting, else 3 idle timeouts (a run
        cut off at its idle timeout whose agent goes on still meets its late spans)."""
        if self.live_late_window_s is not None:
            return self.live_late_window_s
        return 3 * self.live_idle_timeout_s

    @property
    def live_enabled(self) -> bool:
        """True when an OTLP receiver is configured (live grading)."""
        return self.otlp_grpc is not None or self.otlp_http is not None

    @property
    def otlp_grpc_address(self) -> str | None:
        """The OTLP/gRPC address, "default" resolved."""
        return _resolve(self.otlp_grpc, DEFAULT_OTLP_GRPC)

    @property
    def otlp_http_address(self) -> str | None:
        """The OTLP/HTTP address, "default" resolved."""
        return _resolve(self.otlp_http, DEFAULT_OTLP_HTTP)

    def export_target(self) -> ExportTarget:
        """The write-back endpoint resolved (ValueError: the otlp_export_* settings clash)."""
        assert self.otlp_export_endpoint is not None
        return parse_target(
            self.otlp_export_endpoint,
            self.otlp_export_protocol,
            insecure=self.otlp_export_insecure,
            ca_file=self.otlp_export_ca,
            cert_file=self.otlp_export_cert,
            key_file=self.otlp_export_key,
            headers=self.otlp_export_header,
            compression=self.otlp_export_compression,
        )

    @property
    def effective_batch_size(self) -> int:
        """Items per core call: 1 when batching is off (the --no-batching comparison mode)."""
        return self.max_batch_size if self.batching else 1

    def bearer_token(self) -> str | None:
        """The configured token, read from auth_token_file when that is how it was given."""
        if self.auth_token_file is not None:
            with open(self.auth_token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
            if not token:
                raise SettingsError(
                    f"auth_token_file {self.auth_token_file!r} is empty: that would serve "
                    "without authentication"
                )
            return token
        return None if self.auth_token is None else self.auth_token.strip()

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def describe(self) -> dict[str, Any]:
        """Field values for the startup log, secrets masked."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value not in (None, ()):
                value = "***"
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def env_var(cls, name: str) -> str:
        """The environment variable of a field."""
        return ENV_PREFIX + name.upper()

    @classmethod
    def from_sources(
        cls,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Settings:
        """Defaults, then TRAJGRADE_* variables, then explicit overrides (flags win)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(cls.env_var(f.name))
            if raw is not None:
                try:
                    values[f.name] = f.metadata["parse"](raw)
                except ValueError as exc:
                    raise SettingsError(f"{cls.env_var(f.name)}: {exc}") from exc
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = value
        return cls(**values)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field; a flag left out keeps the env var or the default."""
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            help_text = f"{f.metadata['help']} (env {cls.env_var(f.name)}"
            if not f.metadata.get("secret"):
                default = f.default
                shown = ",".join(default) if isinstance(default, tuple) else default
                help_text += f"; default {shown}"
            help_text += ")"
            if f.type in ("bool", bool):
                parser.add_argument(
                    flag,
                    dest=f.name,
                    action=argparse.BooleanOptionalAction,
                    default=None,
                    help=help_text,
                )
            elif f.name in _OPTIONAL_VALUE:
                parser.add_argument(
                    flag,
                    dest=f.name,
                    nargs="?",
                    const=_OPTIONAL_VALUE[f.name],
                    default=None,
                    metavar="ADDR",
                    help=help_text,
                )
            elif f.name == "listen":
                parser.add_argument(
                    flag, dest=f.name, action="append", default=None, help=help_text
                )
            elif f.name == "otlp_export_header":
                parser.add_argument(
                    flag,
                    dest=f.name,
                    action="append",
                    type=header,
                    default=None,
                    metavar="KEY=VALUE",
                    help=help_text,
                )
            else:
                parser.add_argument(
                    flag, dest=f.name, type=f.metadata["parse"], default=None, help=help_text
                )

    @classmethod
    def from_namespace(
        cls, namespace: argparse.Namespace, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Settings from parsed flags (added by add_arguments) over env vars and defaults."""
        overrides: dict[str, Any] = {}
        for f in fields(cls):
            value = getattr(namespace, f.name, None)
            if f.name == "listen" and value is not None:
                value = tuple(a for item in value for a in _addresses(item))
            elif f.name == "otlp_export_header" and value is not None:
                value = tuple(value)
            overrides[f.name] = value
        return cls.from_sources(environ, overrides)
