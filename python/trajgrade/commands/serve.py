"""`trajgrade serve`: run the gRPC grading server (loopback 127.0.0.1:50051 unless told)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trajgrade.server.settings import Settings, SettingsError

DESCRIPTION = """\
Serve trajgrade.v1.GraderService over gRPC, with grpc.health.v1 and server reflection.
Every flag can also be set as a TRAJGRADE_* environment variable (flags win). SIGTERM or
SIGINT drains: health goes NOT_SERVING, new work gets UNAVAILABLE, accepted work finishes
within --grace-period-s, and the process exits 0."""


def register(subparsers: Any) -> None:
    """Add the `serve` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the gRPC grading server",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    Settings.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the settings and serve until a signal; the exit code of the drain."""
    try:
        settings = Settings.from_namespace(args)
        settings.bearer_token()  # a missing or empty token file is a startup error, not later
    except (SettingsError, OSError) as exc:
        print(f"trajgrade serve: {exc}", file=sys.stderr)
        return 2
    # Imported here so `trajgrade --help` does not load grpc and the core.
    from trajgrade.server.app import serve  # noqa: PLC0415

    return serve(settings)
