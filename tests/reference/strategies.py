"""Hypothesis strategies for traces and suites (protobuf JSON dicts) with tricky JSON text.

Arguments are written as JSON *text* with varied spellings of the same value (`1`, `1.0`,
`1e0`, `10e-1`; `-0`; 2^53 + 1; `1e400`), escaped or literal Unicode, duplicate keys and
whitespace, so the core's exact-decimal parsing is exercised against the reference's.
"""

# ruff: noqa: PLR0912, PLR0915 -- one branch per assertion kind, mirroring the SPEC table.

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from .model import KINDS

TOOLS = ["a", "b", "c", "search", "Search", "get_user"]
KEYS = ["x", "y", "id", "q", "items", "é", "0", "10", "a.b"]
NUMBER_SPELLINGS = [
    ["0", "-0", "0.0", "0e5", "-0.0"],
    ["1", "1.0", "1e0", "10e-1", "1E0", "0.1e1"],
    ["2.5", "2.50", "25e-1"],
    ["0.1"],
    ["0.10000000000000001"],
    ["9007199254740993"],
    ["9007199254740992", "9007199254740992.0"],
    ["1e400", "10e399"],
    ["1e21", "1000000000000000000000"],
    ["0.0000001", "1e-7"],
    ["-42", "-4.2e1"],
    ["123456789012345678901234567890"],
]
STRINGS = st.one_of(
    st.sampled_from(["", "a", "A", "é", "e\u0301", "😀", "\u2028", "\n", '"', "\\", "/", "1"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
)


@st.composite
def number_text(draw: st.DrawFn) -> str:
    group = draw(st.sampled_from(NUMBER_SPELLINGS))
    return draw(st.sampled_from(group))


def _string_text(s: str, ascii_only: bool) -> str:
    return json.dumps(s, ensure_ascii=ascii_only)


@st.composite
def json_text(draw: st.DrawFn, depth: int = 3) -> str:
    """JSON text of a random value, with random spellings and whitespace."""
    ws = draw(st.sampled_from(["", " ", "\n "]))
    leaves = st.one_of(
        number_text(),
        st.builds(_string_text, STRINGS, st.booleans()),
        st.sampled_from(["true", "false", "null"]),
    )
    if depth <= 0:
        return draw(leaves)
    kind = draw(st.sampled_from(["leaf", "array", "object", "object"]))
    if kind == "leaf":
        return draw(leaves)
    if kind == "array":
        items = draw(st.lists(json_text(depth - 1), max_size=3))
        return "[" + ws + ("," + ws).join(items) + "]"
    keys = draw(st.lists(st.sampled_from(KEYS), max_size=4))  # repeats: duplicate keys
    values = [draw(json_text(depth - 1)) for _ in keys]
    body = ("," + ws).join(
        f"{_string_text(k, draw(st.booleans()))}:{ws}{v}" for k, v in zip(keys, values, strict=True)
    )
    return "{" + ws + body + ws + "}"


@st.composite
def object_text(draw: st.DrawFn) -> str:
    text = draw(json_text(3))
    return text if text.startswith("{") else "{" + '"x":' + text + "}"


@st.composite
def arguments(draw: st.DrawFn) -> str | None:
    """An `arguments_json`: mostly objects, sometimes other JSON, "", invalid or absent."""
    choice = draw(st.integers(0, 19))
    if choice == 0:
        return None
    if choice == 1:
        return ""
    if choice == 2:
        return draw(st.sampled_from(["{", "{'a':1}", "NaN", "[1,]", "01", "\ufeff{}", "{} {}"]))
    if choice == 3:
        return draw(json_text(2))
    return draw(object_text())


@st.composite
def calls(draw: st.DrawFn, max_size: int = 6) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(0, max_size))):
        call: dict[str, Any] = {"name": draw(st.sampled_from(TOOLS))}
        args = draw(arguments())
        if args is not None:
            call["arguments_json"] = args
        if draw(st.integers(0, 3)) == 0:
            call["result"] = draw(
                st.one_of(json_text(2), st.sampled_from(["5,000.00", "total 42", "Zürich"]))
            )
        if draw(st.integers(0, 5)) == 0:
            call["error"] = True
        out.append(call)
    return out


@st.composite
def traces(draw: st.DrawFn) -> dict[str, Any]:
    trace: dict[str, Any] = {
        "id": draw(st.sampled_from(["t", "trace-1", "é"])),
        "calls": draw(calls()),
    }
    if draw(st.booleans()):
        trace["final_answer"] = draw(
            st.sampled_from(["", "Refunded 5,000.00 USD", "It is 42.", "Zürich", "1 and 2.50"])
        )
    return trace


PATTERNS = [
    r"\d+",
    '"x":',
    r"^\{",
    r"\}$",
    "[a-c]+",
    "x|y",
    r"\w{2,}",
    "(?:ab)+",
    ".",
    "é",
    r"\bx\b",
    r"1e\+21",
    r"^\[",
    "null",
    r"\u00e9",
    "[^a-z]",
    r"true|false",
    r"\s",
    "😀",
]
PATH_POOL = ["x", "y", "id", "items[].x", "x.y", "q"]


@st.composite
def args_match(draw: st.DrawFn, sources: list[str], allow_ignore: bool) -> dict[str, Any]:
    modes = ["MATCH_MODE_EXACT", "MATCH_MODE_SUBSET", "MATCH_MODE_PARTIAL", "MATCH_MODE_REGEX"]
    if allow_ignore:
        modes.append("MATCH_MODE_IGNORE")
    mode = draw(st.sampled_from(modes))
    m: dict[str, Any] = {"mode": mode}
    if mode == "MATCH_MODE_IGNORE":
        return m
    if mode == "MATCH_MODE_REGEX":
        m["pattern"] = draw(st.one_of(st.sampled_from(PATTERNS), js_regex()))
        flags = draw(st.sampled_from(["", "i", "m", "s", "u", "is", "g"]))
        if flags:
            m["flags"] = flags
        return m
    usable = [s for s in sources if s.startswith("{")] if mode == "MATCH_MODE_SUBSET" else sources
    if usable and draw(st.booleans()):
        m["args_json"] = draw(st.sampled_from(usable))  # often the text of an actual call
    else:
        m["args_json"] = draw(object_text())
    if draw(st.integers(0, 3)) == 0:
        m["ignore"] = draw(st.lists(st.sampled_from(PATH_POOL), max_size=2))
    if draw(st.integers(0, 4)) == 0:
        m["defaults_json"] = draw(object_text())
    return m


def _name_or_glob(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"tool": draw(st.sampled_from(TOOLS))}
    spec: dict[str, Any] = {"glob": draw(st.sampled_from(["*", "s*", "?", "[ab]", "[!a]*", "*_*"]))}
    if draw(st.booleans()):
        spec["ignore_case"] = True
    return spec


@st.composite
def assertion(draw: st.DrawFn, trace: dict[str, Any]) -> dict[str, Any]:
    cs = trace.get("calls", [])
    sources = [c["arguments_json"] for c in cs if "arguments_json" in c]
    kind = draw(
        # Every kind but CEL expressions, which the model does not implement.
        st.sampled_from([k for k in KINDS if k != "expression"])
    )
    tool = st.sampled_from(TOOLS)
    body: dict[str, Any]
    if kind == "tool_call_args":
        body = {"tool": draw(tool), "match": draw(args_match(sources, False))}
        if draw(st.integers(0, 3)) == 0:
            body["call_index"] = draw(st.sampled_from([1, 2, -1, 3]))
        elif draw(st.integers(0, 3)) == 0:
            body["quantifier"] = "QUANTIFIER_ALL"
    elif kind == "tool_sequence":
        steps = []
        for _ in range(draw(st.integers(1, 3))):
            step = _name_or_glob(draw)
            if draw(st.integers(0, 2)) == 0:
                step["match"] = draw(args_match(sources, True))
            steps.append(step)
        body = {
            "steps": steps,
            "mode": draw(
                st.sampled_from(
                    ["SEQUENCE_MODE_IN_ORDER", "SEQUENCE_MODE_EXACT", "SEQUENCE_MODE_ANY_ORDER"]
                )
            ),
        }
    elif kind in ("allowed_tools", "forbidden_tools"):
        pool = [*TOOLS, "s*", "[ab]", "*"]
        body = {"tools": draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))}
        if draw(st.booleans()):
            body["ignore_case"] = True
    elif kind == "tool_called":
        body = {"tool": draw(tool)}
    elif kind == "tool_count":
        body = _name_or_glob(draw)
        if draw(st.booleans()):
            body["min"] = draw(st.integers(0, 2))
        if draw(st.booleans()):
            body["max"] = body.get("min", 0) + draw(st.integers(0, 2))
    elif kind == "step_count":
        body = {"max": draw(st.integers(0, 6))} if draw(st.booleans()) else {}
        if not body or draw(st.booleans()):
            body["min"] = draw(st.integers(0, min(body.get("max", 6), 6)))
    elif kind == "order":
        before, after = draw(st.lists(tool, min_size=2, max_size=2, unique=True))
        body = {"before": before, "after": after}
    elif kind == "no_repeated_calls":
        body = {"tools": draw(st.lists(tool, max_size=2)), "max_identical": draw(st.integers(0, 2))}
    elif kind == "efficiency":
        body = {"reference_steps": draw(st.integers(1, 5))}
        if draw(st.booleans()):
            body["max_ratio"] = draw(st.sampled_from([0.7, 1.0, 1.5, 2.0]))
    elif kind == "grounding":
        body = {"values": draw(st.lists(st.sampled_from(["42", "Zürich", "USD", "x"]), max_size=2))}
        if not body["values"] or draw(st.booleans()):
            body["numbers"] = True
    else:
        own = [c for c in cs if _valid_json(c.get("arguments_json"))]
        refs: list[dict[str, Any]] = []
        for c in draw(st.lists(st.sampled_from(own), min_size=1, max_size=4)) if own else []:
            ref = {"name": c["name"]}
            if "arguments_json" in c and draw(st.integers(0, 4)) > 0:
                ref["arguments_json"] = c["arguments_json"]
            refs.append(ref)
        if not refs:
            refs = [{"name": draw(tool)}]
        body = {
            "reference": refs,
            "mode": draw(
                st.sampled_from(
                    [
                        "TRAJECTORY_MODE_STRICT",
                        "TRAJECTORY_MODE_IN_ORDER",
                        "TRAJECTORY_MODE_SUPERSET",
                        "TRAJECTORY_MODE_SUBSET",
                        "TRAJECTORY_MODE_UNORDERED",
                    ]
                )
            ),
            "args": draw(
                st.sampled_from(["MATCH_MODE_EXACT", "MATCH_MODE_PARTIAL", "MATCH_MODE_IGNORE"])
            ),
        }
    a: dict[str, Any] = {kind: body}
    if draw(st.integers(0, 3)) == 0:
        a["negate"] = True
    if draw(st.integers(0, 4)) == 0:
        a["severity"] = draw(st.sampled_from(["SEVERITY_HARD", "SEVERITY_SOFT"]))
    if draw(st.integers(0, 6)) == 0:
        a["name"] = "named"
    return a


def _valid_json(text: str | None) -> bool:
    if text is None:
        return True
    from .jsonval import InvalidJsonError, parse  # noqa: PLC0415

    try:
        parse(text)
    except InvalidJsonError:
        return False
    return True


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(suite, trace): a random trace and a suite built partly from its own calls."""
    trace = draw(traces())
    items = [draw(assertion(trace)) for _ in range(draw(st.integers(1, 4)))]
    return {"assertions": items}, trace


# ---------------------------------------------------------------- generated regexes

_REGEX_ATOMS = [
    "a",
    "b",
    "x",
    "é",
    "1",
    ".",
    r"\d",
    r"\w",
    r"\s",
    r"\D",
    r"\W",
    r"\.",
    r"\{",
    '"',
    ":",
    "[a-c]",
    "[^a-z]",
    r"[\d,]",
    "[é-ü]",
    r"\u0078",
    r"\x22",
]
_ANCHORS = [r"\b", "^", "$"]
_UNBOUNDED = ["*", "+", "*?", "+?"]
_BOUNDED = ["", "", "", "?", "{1,2}", "{2}", "??"]


@st.composite
def js_regex(draw: st.DrawFn) -> str:
    """A pattern in the linear-time JS subset both engines accept (no look-around).

    The reference runs on Python's backtracking `re`, which the C matcher cannot interrupt,
    so patterns stay cheap to backtrack: at most one unbounded quantifier, never on a group,
    and groups hold unquantified atoms only (no nested or overlapping repetition).
    """
    parts = []
    unbounded_left = 1
    named = False
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 5)) == 0:
            parts.append(draw(st.sampled_from(_ANCHORS)))
            continue
        if draw(st.integers(0, 3)) == 0:
            inner = "".join(draw(st.lists(st.sampled_from(_REGEX_ATOMS), min_size=1, max_size=3)))
            if draw(st.booleans()):
                inner += "|" + "".join(
                    draw(st.lists(st.sampled_from(_REGEX_ATOMS), min_size=1, max_size=2))
                )
            opener = draw(st.sampled_from(["(", "(?:"] if named else ["(", "(?:", "(?<g>"]))
            named = named or opener == "(?<g>"
            parts.append(f"{opener}{inner})" + draw(st.sampled_from(_BOUNDED)))
            continue
        quantifiers = _BOUNDED + (_UNBOUNDED if unbounded_left else [])
        quant = draw(st.sampled_from(quantifiers))
        unbounded_left -= quant in _UNBOUNDED
        parts.append(draw(st.sampled_from(_REGEX_ATOMS)) + quant)
    return "".join(parts)


# ---------------------------------------------------------------- broken suites

_BREAKERS: list[tuple[str, dict[str, Any]]] = [
    ("tool_called", {"tool": ""}),
    ("tool_call_args", {"tool": "a"}),
    ("tool_call_args", {"tool": "a", "match": {"mode": "MATCH_MODE_EXACT", "args_json": "{"}}),
    ("tool_call_args", {"tool": "a", "match": {"mode": "MATCH_MODE_SUBSET", "args_json": "[]"}}),
    ("tool_call_args", {"tool": "a", "match": {"mode": "MATCH_MODE_REGEX", "pattern": "(?=a)"}}),
    ("tool_call_args", {"tool": "a", "match": {"mode": "MATCH_MODE_REGEX", "pattern": "(a)\\1"}}),
    (
        "tool_call_args",
        {"tool": "a", "match": {"mode": "MATCH_MODE_REGEX", "pattern": "a", "flags": "x"}},
    ),
    ("tool_call_args", {"tool": "a", "match": {"mode": "MATCH_MODE_EXACT", "pattern": "a"}}),
    ("tool_call_args", {"tool": "a", "match": {"mode": "MATCH_MODE_EXACT", "ignore": ["a[]"]}}),
    ("tool_call_args", {"tool": "a", "quantifier": "QUANTIFIER_ALL", "call_index": 1, "match": {}}),
    ("tool_sequence", {"steps": []}),
    ("tool_sequence", {"steps": [{"tool": "a"}, {"tool": "a", "glob": "a*"}]}),
    ("allowed_tools", {"tools": ["a", "[ab"]}),
    ("forbidden_tools", {"tools": []}),
    ("tool_count", {"tool": "a", "min": 3, "max": 1}),
    ("step_count", {}),
    ("order", {"before": "a", "after": "a"}),
    ("efficiency", {"reference_steps": 0}),
    ("grounding", {}),
    ("trajectory_match", {"reference": []}),
    ("trajectory_match", {"reference": [{"name": "a", "arguments_json": "nope"}]}),
    ("trajectory_match", {"reference": [{"name": "a"}], "args": "MATCH_MODE_REGEX"}),
    (
        "trajectory_match",
        {"reference": [{"name": "a"}], "overrides": [{"tool": "a"}, {"tool": "a"}]},
    ),
]


@st.composite
def broken_suites(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A valid generated suite with one invalid assertion inserted somewhere."""
    suite, trace = draw(cases())
    kind, body = draw(st.sampled_from(_BREAKERS))
    at = draw(st.integers(0, len(suite["assertions"])))
    suite["assertions"].insert(at, {kind: json.loads(json.dumps(body))})
    return suite, trace
