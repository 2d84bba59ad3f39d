"""Routing: the routes file (YAML) that says which suites grade which received runs.

    routes:
      - name: weather                     # shown in logs and errors
        match:                            # every key must match (AND); values are globs
          service.name: "weather-*"
          gen_ai.agent.name: weather_agent
        suites:
          - suites/weather.yaml           # a suite file in any format, relative to this file
          - {file: promptfoo.yaml, test: "books a table"}   # one suite of several
          - {suite_id: "9f2c..."}         # a suite registered with RegisterSuite
        continue: false                   # true: later routes may match the run too

A key matches when any span of the run has it, as a span attribute or a resource attribute,
with a value the glob matches (fnmatch, case-sensitive; booleans read `true` / `false`). The
first matching route wins unless it says `continue: true`. A run no route matches is counted
(`trajgrade_live_traces_dropped_total{reason="unrouted"}`), not graded.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trajgrade import _core
from trajgrade.live.early import EarlySuite, early_suite
from trajgrade.live.records import LiveSpan, with_keys
from trajgrade.suite_formats import SuiteFormatError
from trajgrade.suites import load_suites

log = logging.getLogger("trajgrade.live")


class RoutesError(ValueError):
    """The routes file cannot be used (the previous routes stay in force on a reload)."""


@dataclass(frozen=True)
class SuiteRef:
    """One suite of a route: compiled from a file at load time, or a registered id."""

    label: str
    compiled: Any = None  # _core.CompiledSuite
    suite_id: str = ""
    # Its early-capable assertions (--early-verdicts), compiled with it; None for a
    # registered suite (made when first used) or a suite with none.
    early: EarlySuite | None = field(default=None, compare=False)

    def resolve(self, grader: _core.Grader) -> Any:
        """The compiled suite (a registered one is looked up now: it may come later)."""
        if self.compiled is not None:
            return self.compiled
        return grader.get_suite(self.suite_id)


@dataclass(frozen=True)
class Route:
    """One route: its matchers (key, compiled glob) and its suites."""

    name: str
    match: tuple[tuple[str, re.Pattern[str]], ...]
    suites: tuple[SuiteRef, ...]
    keep_going: bool = False

    def matches(self, values: Mapping[str, set[str]]) -> bool:
        return all(
            any(pattern.fullmatch(value) for value in values.get(key, ()))
            for key, pattern in self.match
        )


@dataclass(frozen=True)
class Routes:
    """The routes of one load of the file, in file order."""

    routes: tuple[Route, ...] = ()

    @functools.cached_property
    def registered_ids(self) -> frozenset[str]:
        """The `suite_id`s of registered suites the routes name (one set per load)."""
        return frozenset(
            ref.suite_id for route in self.routes for ref in route.suites if ref.compiled is None
        )

    @functools.cached_property
    def keys(self) -> frozenset[str]:
        """The attributes the routes match on (one set per load)."""
        return frozenset(key for route in self.routes for key, _ in route.match)

    def suites_for(self, spans: list[LiveSpan]) -> list[SuiteRef]:
        """The suites of the matching routes (each once, in route order). Spans taken in
        before a reload that added keys get those keys read first."""
        with_keys(spans, self.keys)
        values = attribute_values(spans, self.keys)
        out: list[SuiteRef] = []
        for route in self.routes:
            if not route.matches(values):
                continue
            out.extend(ref for ref in route.suites if ref not in out)
            if not route.keep_going:
                break
        return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def attribute_values(spans: Iterable[LiveSpan], keys: frozenset[str]) -> dict[str, set[str]]:
    """Every value each key takes on the spans (span attributes and their resources)."""
    values: dict[str, set[str]] = {key: set() for key in keys}
    if not keys:
        return values
    seen_resources: set[int] = set()
    # A loop over the few keys, not a set intersection per span; most spans hold none.
    for span in spans:
        resource, attrs = span.resource, span.attrs
        if id(resource) not in seen_resources:
            seen_resources.add(id(resource))
            for key in keys:
                if key in resource:
                    values[key].add(_text(resource[key]))
        if attrs:
            for key in keys:
                if key in attrs:
                    values[key].add(_text(attrs[key]))
    return values


def load_routes(path: Path, grader: _core.Grader, *, early: bool = False) -> Routes:
    """Parse and check the whole file, compiling every suite file it names (and, with
    `early`, each one's early sub-suite)."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise RoutesError(f"{path}: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("routes"), list):
        raise RoutesError(f"{path}: expected a mapping with a `routes` list")
    unknown = set(document) - {"routes"}
    if unknown:
        raise RoutesError(f"{path}: unknown keys {sorted(unknown)}")
    routes = []
    for number, entry in enumerate(document["routes"], start=1):
        where = f"{path}: routes[{number}]"
        routes.append(_route(entry, where, path.parent, grader, early))
    return Routes(tuple(routes))


def _route(entry: Any, where: str, base: Path, grader: _core.Grader, early: bool) -> Route:
    if not isinstance(entry, dict):
        raise RoutesError(f"{where}: a route is a mapping")
    unknown = set(entry) - {"name", "match", "suites", "continue"}
    if unknown:
        raise RoutesError(f"{where}: unknown keys {sorted(unknown)}")
    name = str(entry.get("name") or where)
    match = entry.get("match") or {}
    if not isinstance(match, dict):
        raise RoutesError(f"{where}: match is a mapping of attribute to glob")
    matchers = tuple(
        (str(key), re.compile(fnmatch.translate(_text(pattern)))) for key, pattern in match.items()
    )
    suites = entry.get("suites")
    if not isinstance(suites, list) or not suites:
        raise RoutesError(f"{where}: suites must list at least one suite")
    refs = tuple(
        _suite(item, f"{where}.suites[{i}]", base, grader, early) for i, item in enumerate(suites)
    )
    keep_going = entry.get("continue", False)
    if not isinstance(keep_going, bool):
        raise RoutesError(f"{where}: continue is true or false")
    return Route(name, matchers, refs, keep_going)


def _suite(item: Any, where: str, base: Path, grader: _core.Grader, early: bool) -> SuiteRef:
    if isinstance(item, str):
        item = {"file": item}
    if not isinstance(item, dict) or len({"file", "suite_id"} & item.keys()) != 1:
        raise RoutesError(f"{where}: a suite is a file path, {{file: ..}} or {{suite_id: ..}}")
    if "suite_id" in item:
        return SuiteRef(label=f"suite_id {item['suite_id']}", suite_id=str(item["suite_id"]))
    path = Path(str(item["file"]))
    path = path if path.is_absolute() else base / path
    try:
        found = load_suites(path, format=str(item.get("format", "auto")))
        suite = found.pick(str(item["test"])) if "test" in item else found.only()
        compiled = grader.compile_suite(suite.SerializeToString(deterministic=True))
        sub = early_suite(grader, compiled) if early else None
    except (SuiteFormatError, _core.TrajgradeError, ValueError) as exc:
        raise RoutesError(f"{where}: {path}: {exc}") from exc
    return SuiteRef(label=str(path), compiled=compiled, suite_id=compiled.suite_id, early=sub)


class RoutesFile:
    """The routes in force, reloaded when the file changes (mtime poll) or on SIGHUP; a bad
    file keeps the previous routes and logs why."""

    def __init__(self, path: str, grader: _core.Grader, *, early: bool = False) -> None:
        self.path = Path(path)
        self._grader = grader
        self._early = early
        self._stamp: tuple[int, int] | None = None
        self.current = Routes()
        self.loads = 0
        self.errors = 0

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    def load(self) -> Routes:
        """Load now (startup: an error propagates)."""
        stamp = self._file_stamp()
        routes = load_routes(self.path, self._grader, early=self._early)
        self.current, self._stamp = routes, stamp
        self.loads += 1
        return routes

    def reload(self, *, force: bool = False) -> str:
        """Load again if the file changed (or `force`): "ok", "error" (the previous routes
        stay, the error is logged) or "unchanged"."""
        stamp = self._file_stamp()
        if not force and stamp == self._stamp:
            return "unchanged"
        self._stamp = stamp  # a bad file is reported once, not on every poll
        try:
            self.current = load_routes(self.path, self._grader, early=self._early)
        except RoutesError as exc:
            self.errors += 1
            log.error("routes file not reloaded, the previous routes stay in force: %s", exc)
            return "error"
        self.loads += 1
        log.info("routes reloaded from %s: %d routes", self.path, len(self.current.routes))
        return "ok"
