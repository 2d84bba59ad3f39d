"""`LazyGradeResult`: a `GradeResult` kept as the core's bytes until something reads it.

`CompiledSuite.grade_batch` returns these, so a batch costs one small object per trace instead
of a protobuf decode per trace: decoding into Python objects used to cost more than grading.
"""

from __future__ import annotations

from typing import Any

from trajgrade.v1 import result_pb2

_GradeResult = result_pb2.GradeResult
_OWN = frozenset({"_raw", "_message"})


class LazyGradeResult:
    """A `GradeResult` decoded on first use (an attribute, a method, `==`, `str`).

    It answers `isinstance(x, result_pb2.GradeResult)` with True and has every field and
    method of the message; setting a field changes the decoded message. Until it is decoded,
    `SerializeToString()` returns the core's bytes as they are (they equal the deterministic
    encoding). Protobuf calls that need the concrete class as an argument (`CopyFrom(x)`,
    `GradeTraceResponse(result=x)`) take `x.message`, the decoded `GradeResult`.
    """

    __slots__ = ("_message", "_raw")

    _raw: bytes
    _message: result_pb2.GradeResult | None

    def __init__(self, raw: bytes) -> None:
        _set_raw(self, raw)
        _set_message(self, None)

    @property
    def message(self) -> result_pb2.GradeResult:
        """The decoded `GradeResult` (decoded once, then kept)."""
        message = self._message
        if message is None:
            message = _GradeResult.FromString(self._raw)
            _set_message(self, message)
        return message

    # isinstance() falls back to __class__ when type() does not match (as unittest.mock does).
    @property  # type: ignore[misc]
    def __class__(self) -> type[result_pb2.GradeResult]:  # type: ignore[override]
        return _GradeResult

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # an unset slot: never recurse into the message
            raise AttributeError(name)
        return getattr(self.message, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.message, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.message, name)

    def __dir__(self) -> list[str]:
        return sorted({*dir(self.message), "message"})

    def SerializeToString(self, **kwargs: Any) -> bytes:  # noqa: N802 - the protobuf name
        """The message's bytes; the core's own bytes while nothing decoded them."""
        if self._message is None:
            return self._raw
        return self._message.SerializeToString(**kwargs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyGradeResult | _GradeResult):
            undecoded = self._message is None and getattr(other, "_message", 0) is None
            if undecoded and type(other) is LazyGradeResult and self._raw == other._raw:
                return True
            return self.message == (other.message if isinstance(other, LazyGradeResult) else other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] # like every protobuf message: mutable, unhashable

    def __repr__(self) -> str:
        return repr(self.message)

    def __str__(self) -> str:
        return str(self.message)

    def __reduce_ex__(self, protocol: object) -> tuple[Any, tuple[bytes]]:
        # Pickles as itself (copyreg's default would use the spoofed __class__).
        return (LazyGradeResult, (self.SerializeToString(deterministic=True),))


_set_raw = LazyGradeResult.__dict__["_raw"].__set__
_set_message = LazyGradeResult.__dict__["_message"].__set__
