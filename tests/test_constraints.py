"""constraints.txt pins every Python package a fresh clone installs (Makefile: PIP_CONSTRAINT)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version, f"constraints.txt: {line!r} is not an exact pin"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + project["optional-dependencies"]["dev"]
    return [Requirement(text) for text in listed]


def test_every_dependency_is_pinned_within_its_range() -> None:
    pins = _pins()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in constraints.txt: run make constraints"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]} outside pyproject's {requirement}"
        )


def test_the_makefile_hands_the_constraints_to_pip() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^export PIP_CONSTRAINT := \$\(abspath constraints\.txt\)$", makefile, re.M)
