"""The `trajgrade` command line (`trajgrade ...` and `python -m trajgrade ...`)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from trajgrade._core import __version__

# Subcommand modules under trajgrade.commands, in help order. A module that does not exist
# (yet) is skipped, so each command ships on its own.
COMMANDS = ["grade", "serve", "health", "import_", "regrade", "diff"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trajgrade",
        description="Deterministic grading of AI-agent tool-call trajectories.",
    )
    parser.add_argument("--version", action="version", version=f"trajgrade {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module_name = f"trajgrade.commands.{name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parses `argv` (default: sys.argv[1:]) and runs the subcommand; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    code: int = func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
