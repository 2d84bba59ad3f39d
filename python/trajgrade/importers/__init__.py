"""Trace importers: read agent runs in other formats as native `Trace` messages."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from os import PathLike
from pathlib import Path
from typing import Any

from trajgrade.importers import anthropic, jsonl, openai, otlp
from trajgrade.importers.records import MESSAGE_LIST_KEYS, iter_json_records
from trajgrade.importers.report import ImportReport
from trajgrade.v1 import trace_pb2

__all__ = ["FORMATS", "ImportReport", "detect_format", "read"]

FORMATS = ("otlp", "openai", "anthropic", "jsonl", "parquet")
# The top-level keys of a native Trace line (protobuf JSON, snake_case or camelCase).
NATIVE_TRACE_KEYS = frozenset(
    {
        "id",
        "calls",
        "final_answer",
        "finalAnswer",
        "metadata",
        # SPEC v2 (§10).
        "model_calls",
        "modelCalls",
        "turns",
    }
)
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "server_tool_use", "thinking"})

StrPath = str | PathLike[str]


class UnknownFormatError(ValueError):
    """The format of an input file could not be recognised."""


def read(
    path_or_paths: StrPath | Iterable[StrPath],
    format: str = "auto",
    *,
    report: ImportReport | None = None,
    **options: Any,
) -> Iterator[trace_pb2.Trace]:
    """Yield `Trace` messages from one or more files.

    `format` is "auto" (by extension, then by sniffing the first record) or one of FORMATS.
    Everything that could not be mapped is counted in `report` (pass one in to read it).
    Options: `logs` and `group_by`, `dedupe_window_s` (otlp); `error_prefix` (openai);
    `batch_rows` (parquet).
    """
    report = report if report is not None else ImportReport()
    paths = (
        [Path(path_or_paths)]
        if isinstance(path_or_paths, str | PathLike)
        else [Path(p) for p in path_or_paths]
    )
    if format not in ("auto", *FORMATS):
        raise ValueError(f"unknown format {format!r}; expected auto or one of {FORMATS}")
    formats = [format if format != "auto" else detect_format(path) for path in paths]
    # OTLP inputs are read together: one trace's spans may be spread over several files.
    otlp_paths = [p for p, f in zip(paths, formats, strict=True) if f == "otlp"]
    logs = [Path(p) for p in options.get("logs") or ()]
    if logs and not otlp_paths:
        raise ValueError("logs files are only used with OTLP trace inputs")
    done_otlp = False
    for path, fmt in zip(paths, formats, strict=True):
        if fmt == "otlp":
            if not done_otlp:
                done_otlp = True
                yield from otlp.read(
                    otlp_paths,
                    report,
                    logs=logs,
                    group_by=options.get("group_by"),
                    dedupe_window_s=options.get("dedupe_window_s", otlp.DEFAULT_DEDUPE_WINDOW_S),
                )
        elif fmt == "jsonl":
            yield from jsonl.read(path, report)
        elif fmt == "parquet":
            # pyarrow is the optional `parquet` extra: import it only when a file needs it.
            parquet = importlib.import_module("trajgrade.importers.parquet")
            yield from parquet.read(path, report, batch_rows=options.get("batch_rows", 4096))
        elif fmt == "openai":
            yield from openai.read(path, report, error_prefix=options.get("error_prefix"))
        else:
            yield from anthropic.read(path, report)


def detect_format(path: StrPath) -> str:
    """Guess a file's format from its extension, then from its first record."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in otlp.BINARY_SUFFIXES or otlp.is_binary(path):
        return "otlp"
    for _, record in iter_json_records(path, ImportReport()):
        return sniff(record)
    raise UnknownFormatError(f"{path}: empty file")


# One branch per recognisable shape reads better than a table of predicates.
def sniff(record: Any) -> str:  # noqa: PLR0911, PLR0912
    """The format of one parsed JSON record."""
    if isinstance(record, dict):
        if {"resourceSpans", "resource_spans", "resourceLogs", "resource_logs"} & record.keys():
            return "otlp"
        if "calls" in record and record.keys() <= NATIVE_TRACE_KEYS:
            return "jsonl"
        for key in MESSAGE_LIST_KEYS:
            if isinstance(record.get(key), list):
                return sniff(record[key])
        if record.get("type") == "message" and isinstance(record.get("content"), list):
            return "anthropic"
        if isinstance(record.get("input"), list) or isinstance(record.get("output"), list):
            return "openai"
        if "choices" in record:
            return "openai"
    if isinstance(record, list):
        for element in record:
            if isinstance(element, list | dict) and not _is_message(element):
                return sniff(element)
            if _is_anthropic_message(element):
                return "anthropic"
        if any(_is_message(element) for element in record):
            return "openai"
    raise UnknownFormatError("the first record is not a known trace format")


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and ("role" in value or "type" in value)


def _is_anthropic_message(value: Any) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("content"), list):
        return False
    return any(
        isinstance(block, dict) and block.get("type") in _ANTHROPIC_BLOCKS
        for block in value["content"]
    )
