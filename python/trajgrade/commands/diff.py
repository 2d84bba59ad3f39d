"""`trajgrade diff OLD NEW`: verdict flips and assertion changes between two regrade results."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

DESCRIPTION = """\
Compare two results files written by `trajgrade regrade` (.jsonl or .parquet, in any mix).
Traces are matched by trace_id (the n-th occurrence of an id with the n-th). Prints per-assertion
pass-rate changes (an assertion in one run only reads "added" or "removed"), verdict flips by
transition (count and share of the traces in both runs) and the traces whose verdict flipped;
--json prints the same as JSON. Exit code 0, or with --exit-code 1 when any verdict flipped."""


def register(subparsers: Any) -> None:
    """Add the `diff` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "diff",
        help="compare two regrade results: verdict flips and assertion changes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `trajgrade diff`."""
    parser.add_argument("old", metavar="OLD", help="earlier results file")
    parser.add_argument("new", metavar="NEW", help="later results file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--max-flips",
        type=int,
        default=1000,
        metavar="N",
        help="list at most N flipped traces (counts stay complete)",
    )
    parser.add_argument(
        "--exit-code", action="store_true", help="exit 1 when any trace flipped verdict"
    )


def run(args: argparse.Namespace) -> int:
    """Print the diff; 2 when a file cannot be read."""
    from rich.console import Console  # noqa: PLC0415

    from trajgrade.regrade.diff import diff_files  # noqa: PLC0415

    try:
        result = diff_files(args.old, args.new, max_flips=args.max_flips)
    except (OSError, ValueError, KeyError) as exc:
        Console(stderr=True).print(f"[red]trajgrade diff: {exc}[/red]")
        return 2
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        Console().print(result.renderable())
    return 1 if args.exit_code and result.flipped else 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m trajgrade.commands.diff`), same as `trajgrade diff`."""
    parser = argparse.ArgumentParser(
        prog="trajgrade diff",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
