"""Conversion: a converted Suite plus what its source said that could not be converted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trajgrade.importers import exact_json
from trajgrade.v1 import suite_pb2


class SuiteFormatError(ValueError):
    """A suite file could not be converted; `problems` names each part that could not."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Conversion:
    """The converted suite and, for each source part it could not express, a reason."""

    suite: suite_pb2.Suite
    unsupported: list[str] = field(default_factory=list)


def json_text(value: Any) -> str:
    """Expected arguments as JSON text: exact numbers when the source was parsed exactly."""
    return exact_json.dumps(value)
