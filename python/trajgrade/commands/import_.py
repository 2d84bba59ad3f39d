"""`trajgrade import`: convert agent runs in other formats to native traces (JSON Lines)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from trajgrade.importers import FORMATS, ImportReport, detect_format, read
from trajgrade.importers.jsonl import write


def register(subparsers: Any) -> None:
    """Add the `import` subcommand to an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "import",
        help="convert OTLP / OpenAI / Anthropic / JSONL / Parquet runs to native traces",
        description=(
            "Read agent runs and write one native Trace per line (protobuf JSON, snake_case "
            "field names). What could not be mapped is summarised on stderr."
        ),
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT", type=Path, help="input files")
    parser.add_argument(
        "--format", default="auto", choices=("auto", *FORMATS), help="input format (default auto)"
    )
    parser.add_argument(
        "--logs",
        nargs="+",
        default=[],
        type=Path,
        metavar="OTLP_LOGS",
        help="OTLP logs files with gen_ai.* events (OTLP inputs only)",
    )
    parser.add_argument(
        "--group-by",
        metavar="ATTR",
        help="OTLP: one trace per value of this span/resource attribute instead of per trace id",
    )
    parser.add_argument(
        "--error-prefix",
        metavar="TEXT",
        help="OpenAI: mark a tool result starting with TEXT as an error (e.g. 'Error:')",
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="output JSON Lines file ('-' for stdout)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Import, write, report. Exit status 1 when no trace, or not one tool call, was produced."""
    report = ImportReport()
    options: dict[str, Any] = {}
    if args.logs:
        options["logs"] = args.logs
    if args.group_by:
        options["group_by"] = args.group_by
    if args.error_prefix:
        options["error_prefix"] = args.error_prefix
    try:
        traces = read(args.inputs, args.format, report=report, **options)
        if str(args.out) == "-":
            count = write(traces, sys.stdout)
        else:
            with args.out.open("w", encoding="utf-8") as out:
                count = write(traces, out)
    except (OSError, ValueError) as exc:
        print(f"trajgrade import: {exc}", file=sys.stderr)
        return 2
    print(report.summary(), file=sys.stderr)
    if count and not report.calls:
        # Traces without a single call are almost always a shape we did not recognise.
        print(
            f"trajgrade import: {count} trace(s) but no tool call mapped (input read as "
            f"{_formats(args)}); the lines above say what was seen and where, and "
            "docs/trace-formats.md lists the shapes each format maps",
            file=sys.stderr,
        )
        return 1
    return 0 if count else 1


def _formats(args: argparse.Namespace) -> str:
    if args.format != "auto":
        return str(args.format)
    seen: list[str] = []
    for path in args.inputs:
        try:
            fmt = detect_format(path)
        except (OSError, ValueError):
            continue
        if fmt not in seen:
            seen.append(fmt)
    return ", ".join(seen) or "unknown"
