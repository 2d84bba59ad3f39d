"""Fixtures for the server tests (defined in server_harness, shared with tests/test_concurrency)."""

from .server_harness import (  # noqa: F401 - pytest finds fixtures by name
    cases,
    invalid_cases,
    make_server,
    reference,
    server,
    valid_cases,
)
