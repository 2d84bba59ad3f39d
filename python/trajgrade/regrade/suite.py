"""Suite files for regrade, read through the public trajgrade.load_suite (every suite format)."""

from __future__ import annotations

from trajgrade.suites import load_suite as _load_suite
from trajgrade.v1 import suite_pb2


class SuiteFileError(Exception):
    """The suite file cannot be read."""


def load_suite(path: str) -> suite_pb2.Suite:
    """The Suite in `path`; an invalid suite raises trajgrade.InvalidSuiteError (with its field)."""
    try:
        return _load_suite(path)
    except OSError as exc:
        raise SuiteFileError(f"{path}: {exc.strerror or exc}") from None
