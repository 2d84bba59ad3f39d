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
from trajgrade.suite_formats import SuiteFormatError, SuiteSet
from trajgrade.suites import SUITE_FORMATS, format_error, load_suites
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
        "--suite",
        required=True,
        help="suite file (JSON or YAML): native, Orbit, promptfoo (a test file or "
        "promptfooconfig.yaml) or ADK, detected (docs/suite-formats.md)",
    )
    add_suite_arguments(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="one trace as protobuf JSON (a file, '-' for stdin)")
    source.add_argument("--traces", help="JSONL file, one trace per line ('-' for stdin)")
    parser.add_argument("--json", action="store_true", help="print the GradeResult as JSON")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when any graded verdict is FAIL"
    )
    parser.set_defaults(func=run)


def add_suite_arguments(parser: argparse.ArgumentParser) -> None:
    """--suite-format, --skip-unsupported, --test: how a suite file of any format is read."""
    parser.add_argument(
        "--suite-format",
        default="auto",
        choices=SUITE_FORMATS,
        help="the suite file's format (default: detected)",
    )
    parser.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="leave out, and list on stderr, what the suite file says that cannot be graded "
        "(model-graded or javascript assertions, unknown keys) instead of failing",
    )
    parser.add_argument(
        "--test",
        metavar="NAME",
        default=None,
        help="the suite to use from a file holding several (promptfoo tests by description, "
        "ADK eval cases by eval_id); grade defaults to each trace's metadata.test, regrade "
        "needs it",
    )


def read_suites(args: argparse.Namespace, command: str) -> SuiteSet:
    """The suites of --suite as the flags say; the left-out parts are listed on stderr."""
    found = load_suites(
        Path(args.suite), format=args.suite_format, allow_unsupported=args.skip_unsupported
    )
    for part in found.skipped:
        print(f"trajgrade {command}: left out (--skip-unsupported): {part}", file=sys.stderr)
    if args.test is not None:
        try:
            chosen = found.pick(args.test)
        except SuiteFormatError as exc:
            raise format_error(exc) from None
        found = SuiteSet(found.format, {args.test: chosen}, found.skipped)
    return found


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
    test, several = None, False
    suites: dict[str, CompiledSuite] = {}
    try:
        found = read_suites(args, "grade").suites
        several = len(found) > 1
        for test, suite_message in found.items():
            suites[test] = compile_suite(suite_message)
    except TrajgradeError as exc:
        pairs: list[tuple[str, str]] = list(getattr(exc, "problems", []))
        message = pairs[0][1] if pairs else exc.message or str(exc)
        extra: dict[str, Any] = (
            {"problems": [{"field": f, "message": m} for f, m in pairs]} if pairs else {}
        )
        if several:
            extra["test"] = test
        _print_error("INVALID_ARGUMENT", exc.field, message, **extra)
        return EXIT_INVALID
    if args.traces is not None:
        return _grade_lines(suites, args)
    return _grade_one(suites, args)


def _test_of(trace: Any) -> str | None:
    """The test a trace names in metadata.test (None when it names none)."""
    metadata = trace.get("metadata") if isinstance(trace, dict) else None
    test = metadata.get("test") if isinstance(metadata, dict) else None
    return test if isinstance(test, str) else None


def _pick(suites: dict[str, CompiledSuite], trace: Any) -> CompiledSuite:
    """The suite of a trace: the only one, else the one its metadata.test names."""
    if len(suites) == 1:
        return next(iter(suites.values()))
    name = _test_of(trace)
    if name is None:
        raise _NoTestError(
            "metadata.test",
            f"the suite file holds {len(suites)} tests; the trace must name one in "
            f"metadata.test (or pass --test): {', '.join(map(repr, suites))}",
        )
    if name not in suites:
        raise _NoTestError(
            "metadata.test", f"no test named {name!r}; tests: {', '.join(map(repr, suites))}"
        )
    return suites[name]


class _NoTestError(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _grade_one(suites: dict[str, CompiledSuite], args: argparse.Namespace) -> int:
    try:
        text = _read(args.trace)
        parsed = _parse_line(text)
        result = _pick(suites, parsed).grade(text)
    except OSError as exc:
        _print_error("INVALID_ARGUMENT", "trace", f"cannot read {args.trace}: {exc.strerror}")
        return EXIT_INVALID
    except (TrajgradeError, _NoTestError) as exc:
        _print_error("INVALID_ARGUMENT", exc.field, exc.message or str(exc))
        return EXIT_INVALID
    if args.json:
        print(to_json(result))
    else:
        print_table(result)
    failed = result.verdict == result_pb2.VERDICT_FAIL
    return EXIT_VERDICT_FAIL if args.check and failed else EXIT_OK


def _grade_lines(suites: dict[str, CompiledSuite], args: argparse.Namespace) -> int:
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
    outcomes = _grade_by_test(suites, [_parse_line(line) for line in lines])
    graded = failed = 0
    for outcome in outcomes:
        print(to_json(outcome))
        if isinstance(outcome, result_pb2.GradeResult):
            graded += 1
            failed += outcome.verdict == result_pb2.VERDICT_FAIL
    if outcomes and graded == 0:
        return EXIT_INVALID
    return EXIT_VERDICT_FAIL if args.check and failed else EXIT_OK


def _grade_by_test(
    suites: dict[str, CompiledSuite], traces: list[Any]
) -> list[result_pb2.GradeResult | result_pb2.ItemError]:
    """Each trace graded against its test's suite (one batch per test), in input order."""
    outcomes: list[result_pb2.GradeResult | result_pb2.ItemError | None] = [None] * len(traces)
    groups: dict[str, list[int]] = {}
    for i, trace in enumerate(traces):
        try:
            suite = _pick(suites, trace)
        except _NoTestError as exc:
            trace_id = trace.get("id") if isinstance(trace, dict) else None
            outcomes[i] = result_pb2.ItemError(
                trace_id=trace_id if isinstance(trace_id, str) else "",
                reason_code="UNKNOWN_TEST",
                field=f"traces[{i}].{exc.field}",
                message=exc.message,
            )
            continue
        groups.setdefault(suite.suite_id, []).append(i)
    by_id = {s.suite_id: s for s in suites.values()}
    for suite_id, indexes in groups.items():
        graded = by_id[suite_id].grade_batch([traces[i] for i in indexes])
        for k, (i, outcome) in enumerate(zip(indexes, graded, strict=True)):
            if isinstance(outcome, result_pb2.ItemError) and k != i:
                # The batch numbers items within the group; report the line's index.
                outcome.field = outcome.field.replace(f"traces[{k}]", f"traces[{i}]", 1)
            outcomes[i] = outcome
    return [o for o in outcomes if o is not None]


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
        f"mean score {result.mean_score:.4f}, {result.soft_failures} soft failure(s)",
        caption=f"suite {result.suite_id}",
    )
    for column in ("#", "assertion", "status", "severity"):
        table.add_column(column, no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=1)
    table.add_column("positions", overflow="fold")
    for i, r in enumerate(result.results, start=1):
        status = result_pb2.AssertionStatus.Name(r.status).removeprefix("ASSERTION_STATUS_")
        style = "green" if r.status == result_pb2.ASSERTION_STATUS_PASS else "red"
        severity = assertion_pb2.Severity.Name(r.severity).removeprefix("SEVERITY_")
        reason = f"{r.reason_code}: {r.reason}" if r.reason_code else ""
        positions = ", ".join(map(str, r.positions))
        table.add_row(
            str(i), r.name, f"[{style}]{status}[/]", severity, f"{r.score:.4g}", reason, positions
        )
    console.print(table)
