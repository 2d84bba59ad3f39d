"""`trajgrade grade`: grade one trace (table or JSON) or a JSONL file of traces (JSON lines).

Exit codes (docs/cli.md): 0 graded (whatever the verdicts, unless `--check`); 1 with `--check`
when some graded verdict is FAIL; 2 invalid suite, unreadable/invalid `--trace`, or a
`--traces` file in which no line could be graded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table

from trajgrade._core import TrajgradeError
from trajgrade.grading import CompiledSuite, compile_suite
from trajgrade.v1 import assertion_pb2, result_pb2

EXIT_OK, EXIT_VERDICT_FAIL, EXIT_INVALID = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `grade` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "grade",
        help="grade a trace (or a JSONL file of traces) against a suite",
        description="Grade traces against a suite. One --trace prints a table (or the "
        "GradeResult as JSON with --json); --traces FILE.jsonl prints one JSON line per "
        "input line, in order (a line that cannot be graded prints its ItemError).",
    )
    parser.add_argument(
        "--suite", required=True, help="suite file: protobuf JSON or YAML (.json/.yaml/.yml)"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="one trace as protobuf JSON (a file, '-' for stdin)")
    source.add_argument("--traces", help="JSONL file, one trace per line ('-' for stdin)")
    parser.add_argument("--json", action="store_true", help="print the GradeResult as JSON")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when any graded verdict is FAIL"
    )
    parser.set_defaults(func=run)


def to_json(message: Message) -> str:
    """One-line protobuf JSON: snake_case names, enum names, fields with defaults printed."""
    return json_format.MessageToJson(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
        indent=None,
    )


def _print_error(code: str, field: str, message: str, **extra: Any) -> None:
    print(json.dumps({"error": code, "field": field, "message": message, **extra}))


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    return Path(path).read_text(encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    try:
        suite = compile_suite(Path(args.suite))
    except TrajgradeError as exc:
        pairs: list[tuple[str, str]] = list(getattr(exc, "problems", []))
        message = pairs[0][1] if pairs else exc.message or str(exc)
        extra = {"problems": [{"field": f, "message": m} for f, m in pairs]} if pairs else {}
        _print_error("INVALID_ARGUMENT", exc.field, message, **extra)
        return EXIT_INVALID
    if args.traces is not None:
        return _grade_lines(suite, args)
    return _grade_one(suite, args)


def _grade_one(suite: CompiledSuite, args: argparse.Namespace) -> int:
    try:
        result = suite.grade(_read(args.trace))
    except OSError as exc:
        _print_error("INVALID_ARGUMENT", "trace", f"cannot read {args.trace}: {exc.strerror}")
        return EXIT_INVALID
    except TrajgradeError as exc:
        _print_error("INVALID_ARGUMENT", exc.field, exc.message or str(exc))
        return EXIT_INVALID
    if args.json:
        print(to_json(result))
    else:
        print_table(result)
    failed = result.verdict == result_pb2.VERDICT_FAIL
    return EXIT_VERDICT_FAIL if args.check and failed else EXIT_OK


def _grade_lines(suite: CompiledSuite, args: argparse.Namespace) -> int:
    try:
        text = _read(args.traces)
    except OSError as exc:
        _print_error("INVALID_ARGUMENT", "traces", f"cannot read {args.traces}: {exc.strerror}")
        return EXIT_INVALID
    # Split on "\n" only (U+2028 inside a JSON string is not a line break); a final newline
    # does not start another line.
    lines = text.split("\n")
    if lines and lines[-1].strip() == "":
        lines.pop()
    outcomes = suite.grade_batch([_parse_line(line) for line in lines])
    graded = failed = 0
    for outcome in outcomes:
        print(to_json(outcome))
        if isinstance(outcome, result_pb2.GradeResult):
            graded += 1
            failed += outcome.verdict == result_pb2.VERDICT_FAIL
    if outcomes and graded == 0:
        return EXIT_INVALID
    return EXIT_VERDICT_FAIL if args.check and failed else EXIT_OK


def _parse_line(line: str) -> Any:
    """The line as a dict when it is a JSON object (so an ItemError can carry its id)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return line
    return value if isinstance(value, dict) else line


def print_table(result: result_pb2.GradeResult) -> None:
    """A readable table of one GradeResult."""
    verdict = result_pb2.Verdict.Name(result.verdict).removeprefix("VERDICT_")
    console = Console(highlight=False)
    table = Table(
        title=f"trace {result.trace_id or '(no id)'}: {verdict}, score {result.score:.4g}, "
        f"{result.soft_failures} soft failure(s)",
        caption=f"suite {result.suite_id}",
    )
    for column in ("#", "assertion", "status", "severity"):
        table.add_column(column, no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=1)
    table.add_column("positions", overflow="fold")
    for i, r in enumerate(result.results, start=1):
        status = result_pb2.AssertionStatus.Name(r.status).removeprefix("ASSERTION_STATUS_")
        style = "green" if r.status == result_pb2.ASSERTION_STATUS_PASS else "red"
        severity = assertion_pb2.Severity.Name(r.severity).removeprefix("SEVERITY_")
        reason = f"{r.reason_code}: {r.reason}" if r.reason_code else ""
        positions = ", ".join(map(str, r.positions))
        table.add_row(str(i), r.name, f"[{style}]{status}[/]", severity, reason, positions)
    console.print(table)
