"""What a WatchResults call sends (sans-IO): the filters, checked before anything is sent."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias

from trajgrade.v1 import grader_service_pb2, result_pb2

VerdictInput: TypeAlias = "int | str"
"""A verdict to follow: `result_pb2.VERDICT_PASS`, or a name: "PASS", "fail", "VERDICT_FAIL"."""

_VERDICTS = {
    name.removeprefix("VERDICT_"): number
    for name, number in result_pb2.Verdict.items()
    if number != result_pb2.VERDICT_UNSPECIFIED
}


def _verdict(value: VerdictInput) -> result_pb2.Verdict.ValueType:
    if isinstance(value, str):
        number = _VERDICTS.get(value.upper().removeprefix("VERDICT_"))
        if number is not None:
            return number
    elif value in _VERDICTS.values():
        return result_pb2.Verdict.ValueType(value)
    raise ValueError(f"unknown verdict {value!r}: use PASS or FAIL")


def watch_request(
    suite_ids: Iterable[str], verdicts: Iterable[VerdictInput], service_names: Iterable[str]
) -> bytes:
    """The serialized WatchResultsRequest; an empty filter matches everything."""
    # One str is an iterable of characters: a common slip, refused rather than sent.
    for name, values in (("suite_ids", suite_ids), ("service_names", service_names)):
        if isinstance(values, str):
            raise TypeError(f"{name} takes a list of strings, not one string")
    request = grader_service_pb2.WatchResultsRequest(
        suite_ids=list(suite_ids),
        verdicts=[_verdict(v) for v in ([verdicts] if isinstance(verdicts, str) else verdicts)],
        service_names=list(service_names),
    )
    return request.SerializeToString()
