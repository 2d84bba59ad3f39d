"""`trajgrade regrade`: grade trace files in bulk into a results file, with summary and report."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajgrade.client import Client

# The bearer token for --server when no --token-file is given (an env var: flags show in ps).
TOKEN_ENV = "TRAJGRADE_TOKEN"

DESCRIPTION = """\
Grade every trace in INPUT... against a suite and write one result row per trace, in input
order, to --out (.jsonl: protobuf JSON of GradeResult per line; .parquet: a stable schema; see
docs/regrade.md). Memory stays bounded whatever the input size. Finished chunks are committed as
they go: after Ctrl-C or a crash, run the same command with --resume to continue. Exit codes:
0 done, 1 pass rate below --min-pass-rate, 2 bad usage or input, 130 interrupted."""


def register(subparsers: Any) -> None:
    """Add the `regrade` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "regrade",
        help="grade trace files in bulk (local, --server or --engine ray)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `trajgrade regrade`."""
    from trajgrade.regrade.source import FORMATS  # noqa: PLC0415

    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="trace files")
    from trajgrade.commands.grade import add_suite_arguments  # noqa: PLC0415

    parser.add_argument(
        "--suite",
        required=True,
        help="suite file (JSON or YAML): native, Orbit, promptfoo or ADK, detected",
    )
    add_suite_arguments(parser)
    parser.add_argument("--format", default="auto", choices=FORMATS, help="input format")
    parser.add_argument("--out", required=True, help="results file: .jsonl or .parquet")
    parser.add_argument(
        "--min-pass-rate",
        type=float,
        default=None,
        metavar="RATE",
        help="exit 1 when the fraction of PASS verdicts is below RATE (0..1)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue an interrupted run toward the same --out"
    )
    parser.add_argument(
        "--server",
        metavar="ADDR",
        default=None,
        help="grade through StreamGradeTraces on a running server (host:port)",
    )
    server = parser.add_argument_group(
        "--server connection", "as the Python client takes them (docs/regrade.md)"
    )
    server.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help=f"bearer token for the server, read from FILE (or the {TOKEN_ENV} variable)",
    )
    server.add_argument(
        "--tls", action="store_true", help="TLS with the system's root certificates"
    )
    server.add_argument(
        "--tls-ca-file", metavar="PEM", default=None, help="CA to verify the server (enables TLS)"
    )
    server.add_argument(
        "--tls-cert-file", metavar="PEM", default=None, help="client certificate (mTLS)"
    )
    server.add_argument(
        "--tls-key-file", metavar="PEM", default=None, help="client private key (mTLS)"
    )
    server.add_argument(
        "--tls-server-name", default=None, help="name to verify in the server certificate"
    )
    parser.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local (default) or ray (RAY_ADDRESS for a cluster; native JSONL and Parquet)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        metavar="N",
        help="traces per core batch and per committed chunk (default 2048)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="grading threads (0 = one per core; per worker with --engine ray)",
    )
    parser.add_argument(
        "--report", metavar="HTML", default=None, help="write a self-contained HTML report"
    )
    parser.add_argument(
        "--baseline",
        metavar="OLD_RESULTS",
        default=None,
        help="earlier results to show verdict flips against in the report",
    )
    parser.add_argument(
        "--report-traces",
        type=int,
        default=20_000,
        metavar="N",
        help="failing traces listed in the report (all are counted; default 20000)",
    )
    parser.add_argument(
        "--report-calls",
        type=int,
        default=1_000,
        metavar="N",
        help="of those, the first N open to their calls, read back from the inputs (default 1000)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="with --engine ray: Ray's INFO logs, worker output and progress bars",
    )


def run(args: argparse.Namespace) -> int:  # noqa: PLR0911  (one return per exit code)
    """Run the regrade; the exit code as documented in DESCRIPTION."""
    from rich.console import Console  # noqa: PLC0415

    from trajgrade import regrade as api  # noqa: PLC0415
    from trajgrade.regrade.diff import diff_files  # noqa: PLC0415
    from trajgrade.regrade.report import RunInfo, write_report  # noqa: PLC0415

    console = Console(stderr=True)
    chunk_size = args.chunk_size or api.DEFAULT_CHUNK_SIZE
    if args.min_pass_rate is not None and not 0.0 <= args.min_pass_rate <= 1.0:
        console.print("[red]trajgrade regrade: --min-pass-rate must be within 0..1[/red]")
        return 2
    if args.report_traces < 0 or args.report_calls < 0:
        console.print(
            "[red]trajgrade regrade: --report-traces and --report-calls must be at least 0[/red]"
        )
        return 2
    if args.engine == "ray" and args.server:
        console.print("[red]trajgrade regrade: --engine ray takes no --server[/red]")
        return 2
    try:
        suite = _suite_bytes(args)
        if args.engine == "ray":
            from trajgrade.regrade import ray as ray_engine  # noqa: PLC0415

            ray_engine.init(verbose=args.verbose)
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(_client(args)) if args.server else None
            summary = api.regrade(
                args.inputs,
                suite,
                args.out,
                format=args.format,
                chunk_size=chunk_size,
                resume=args.resume,
                server=client,
                threads=args.threads,
                engine=args.engine,
                console=console,
                show_progress=not args.no_progress and console.is_terminal,
            )
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted: finished chunks are committed; rerun with --resume "
            "to continue[/yellow]"
        )
        return 130
    except (api.SourceError, api.SuiteFileError, api.ResumeError, ValueError, OSError) as exc:
        console.print(f"[red]trajgrade regrade: {exc}[/red]")
        return 2
    except Exception as exc:  # core and server errors carry a reason; say it, not a traceback
        reason = getattr(exc, "reason_code", type(exc).__name__)
        console.print(f"[red]trajgrade regrade: {reason}: {exc}[/red]")
        return 2
    Console().print(summary.table())
    if args.report:
        diff = diff_files(args.baseline, args.out) if args.baseline else None
        info = RunInfo(
            suite_name=_suite_name(suite),
            inputs=args.inputs,
            input_format=args.format,
            results=args.out,
            baseline=args.baseline or "",
        )
        write_report(
            args.report,
            summary,
            diff,
            info=info,
            max_traces=args.report_traces,
            max_call_traces=args.report_calls,
        )
        console.print(f"report: {args.report}")
    if args.min_pass_rate is not None and summary.pass_rate < args.min_pass_rate:
        console.print(
            f"[red]pass rate {summary.pass_rate:.2%} is below --min-pass-rate "
            f"{args.min_pass_rate:.2%}[/red]"
        )
        return 1
    return 0


def _client(args: argparse.Namespace) -> Client:
    """The client for --server, with the TLS and token flags."""
    from trajgrade.client import Client  # noqa: PLC0415

    token = os.environ.get(TOKEN_ENV) or None
    if args.token_file is not None:
        with open(args.token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
        if not token:
            raise ValueError(f"--token-file {args.token_file}: the file is empty")
    return Client(
        args.server,
        token=token,
        tls=args.tls,
        root_certificates=args.tls_ca_file,
        certificate_chain=args.tls_cert_file,
        private_key=args.tls_key_file,
        server_name=args.tls_server_name,
    )


def _suite_name(suite: bytes) -> str:
    """The suite's human name (Suite.name), shown in the report."""
    from trajgrade.v1 import suite_pb2  # noqa: PLC0415

    return suite_pb2.Suite.FromString(suite).name


def _suite_bytes(args: argparse.Namespace) -> bytes:
    """The one suite of --suite (any format; --test picks one of several) as Suite bytes."""
    from trajgrade.commands.grade import read_suites  # noqa: PLC0415
    from trajgrade.suite_formats import SuiteFormatError  # noqa: PLC0415
    from trajgrade.suites import format_error  # noqa: PLC0415

    try:
        suite = read_suites(args, "regrade").only()
    except SuiteFormatError as exc:
        raise format_error(exc) from None
    return suite.SerializeToString(deterministic=True)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m trajgrade.commands.regrade`), same as `trajgrade regrade`."""
    parser = argparse.ArgumentParser(
        prog="trajgrade regrade",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
