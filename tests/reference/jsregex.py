"""The JS RegExp subset (SPEC §2, §9.28) translated onto Python `re`, plus tool-name globs.

Translation covers what the conformance cases and the differential generator use: literals,
escapes (`\\d \\w \\s \\b` ASCII / JS sets, `\\xHH`, `\\uHHHH`, `\\u{..}`, `\\cX`, Annex B identity
escapes), classes and ranges, groups (capturing, non-capturing, named), alternation,
quantifiers (greedy and lazy, counted), anchors and the flags i m s u g y d. Not modelled:
Unicode property escapes (`\\p{..}`), and JS-vs-Python case-folding differences for non-ASCII.
"""

# ruff: noqa: PLR0911, PLR0912, PLR0915 -- a hand-written translator: one branch per construct
# keeps it checkable against the ECMAScript grammar; splitting it would hide that.

from __future__ import annotations

import re

FLAGS = "dgimsuy"
LINE_TERMINATORS = "\n\r\u2028\u2029"
_WS = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_WORD = "A-Za-z0-9_"
_SYNTAX = set("^$\\.*+?()[]{}|/")


class RegexError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field  # "pattern" or "flags"


def _ranges_complement(ranges: list[tuple[int, int]]) -> str:
    out, lo = [], 0
    for a, b in sorted(ranges):
        if a > lo:
            out.append(_cls_char(lo) + "-" + _cls_char(a - 1))
        lo = max(lo, b + 1)
    out.append(_cls_char(lo) + "-" + _cls_char(0x10FFFF))
    return "".join(out)


def _cls_char(cp: int) -> str:
    return f"\\U{cp:08x}"


_WS_RANGES = [
    (ord(c), ord(c)) for c in "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
]
_WS_RANGES.append((0x2000, 0x200A))
_CLASS_BODY = {
    "d": "0-9",
    "w": _WORD,
    "s": _WS,
    "D": _ranges_complement([(0x30, 0x39)]),
    "W": _ranges_complement([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x5F, 0x5F)]),
    "S": _ranges_complement(_WS_RANGES),
}
_W = f"[{_WORD}]"
_BOUNDARY = f"(?:(?<={_W})(?!{_W})|(?<!{_W})(?={_W}))"
_NOT_BOUNDARY = f"(?:(?<={_W})(?={_W})|(?<!{_W})(?!{_W}))"
_QUANT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_HEX = "0123456789abcdefABCDEF"


def check_flags(flags: str) -> None:
    if len(set(flags)) != len(flags):
        raise RegexError("flags", f"duplicate flag in {flags!r}")
    for f in flags:
        if f not in FLAGS:
            raise RegexError("flags", f"unsupported flag {f!r}")


class _Translator:
    def __init__(self, pattern: str, flags: str) -> None:
        self.p = pattern
        self.i = 0
        self.u = "u" in flags
        self.m = "m" in flags
        self.s = "s" in flags

    def error(self, message: str) -> RegexError:
        return RegexError("pattern", message)

    def peek(self, n: int = 0) -> str:
        j = self.i + n
        return self.p[j] if j < len(self.p) else ""

    def _hex(self, n: int) -> int | None:
        text = self.p[self.i : self.i + n]
        if len(text) == n and all(c in _HEX for c in text):
            self.i += n
            return int(text, 16)
        return None

    def escape_code_point(self) -> int | None:
        """After a backslash: the code point of a character escape, or None if not one."""
        c = self.peek()
        simple = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
        if c in simple:
            self.i += 1
            return simple[c]
        if c == "0" and not self.peek(1).isdigit():
            self.i += 1
            return 0
        if c == "x":
            self.i += 1
            v = self._hex(2)
            if v is None:
                if self.u:
                    raise self.error("invalid \\x escape")
                return ord("x")
            return v
        if c == "u":
            self.i += 1
            if self.u and self.peek() == "{":
                end = self.p.find("}", self.i)
                body = self.p[self.i + 1 : end] if end > 0 else ""
                if not body or any(ch not in _HEX for ch in body) or int(body, 16) > 0x10FFFF:
                    raise self.error("invalid \\u{...} escape")
                self.i = end + 1
                return int(body, 16)
            v = self._hex(4)
            if v is None:
                if self.u:
                    raise self.error("invalid \\u escape")
                return ord("u")
            if 0xD800 <= v <= 0xDBFF and self.p[self.i : self.i + 2] == "\\u":
                save = self.i
                self.i += 2
                lo = self._hex(4)
                if lo is not None and 0xDC00 <= lo <= 0xDFFF:
                    return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00)
                self.i = save
            return v
        if c == "c":
            if self.peek(1).isascii() and self.peek(1).isalpha():
                self.i += 2
                return ord(self.p[self.i - 1]) % 32
            if self.u:
                raise self.error("invalid \\c escape")
            return None  # Annex B: a literal backslash, then `c` as an ordinary character
        if c.isdigit():
            raise self.error("backreferences and legacy octal escapes are not supported")
        if c == "k":
            raise self.error("backreferences are not supported")
        if c in ("p", "P") and self.u:
            raise self.error("Unicode property escapes are not modelled")
        if c == "":
            raise self.error("\\ at end of pattern")
        if c in _SYNTAX or (not self.u and c not in "bBdDwWsS"):
            self.i += 1
            return ord(c)
        if self.u and c not in "bBdDwWsS":
            raise self.error(f"invalid escape \\{c}")
        return None

    def translate(self) -> str:
        out: list[str] = []
        while self.i < len(self.p):
            c = self.p[self.i]
            self.i += 1
            if c == "\\":
                d = self.peek()
                if d in _CLASS_BODY:
                    self.i += 1
                    out.append(f"[{_CLASS_BODY[d]}]")
                elif d == "b":
                    self.i += 1
                    out.append(_BOUNDARY)
                elif d == "B":
                    self.i += 1
                    out.append(_NOT_BOUNDARY)
                else:
                    cp = self.escape_code_point()
                    out.append(re.escape("\\") if cp is None else re.escape(chr(cp)))
            elif c == ".":
                out.append(r"[\s\S]" if self.s else f"[^{LINE_TERMINATORS}]")
            elif c == "^":
                t = LINE_TERMINATORS
                out.append(f"(?:(?<![\\s\\S])|(?<=[{t}]))" if self.m else r"(?<![\s\S])")
            elif c == "$":
                t = LINE_TERMINATORS
                out.append(f"(?=[{t}]|(?![\\s\\S]))" if self.m else r"(?![\s\S])")
            elif c == "(":
                if self.peek() == "?":
                    rest = self.p[self.i + 1 : self.i + 3]
                    if rest[:1] in ("=", "!") or rest in ("<=", "<!"):
                        raise self.error("look-around is not supported")
                    if rest[:1] == ":":
                        self.i += 2
                        out.append("(?:")
                    elif rest[:1] == "<":
                        end = self.p.find(">", self.i)
                        name = self.p[self.i + 2 : end] if end > 0 else ""
                        if not name.isidentifier():
                            raise self.error("invalid group name")
                        self.i = end + 1
                        out.append(f"(?P<{name}>")
                    else:
                        raise self.error("invalid group")
                else:
                    out.append("(")
            elif c in ")|*+?":
                out.append(c)
            elif c == "{":
                m = _QUANT.match(self.p, self.i - 1)
                if m:
                    out.append(m.group(0))
                    self.i = m.end()
                elif self.u:
                    raise self.error("lone {")
                else:
                    out.append(r"\{")
            elif c in "}]":
                if self.u:
                    raise self.error(f"lone {c}")
                out.append(re.escape(c))
            elif c == "[":
                out.append(self.char_class())
            else:
                out.append(re.escape(c))
        return "".join(out)

    def class_atom(self) -> tuple[int | None, str]:
        """One class member: (code point, "") for a character, (None, body) for a set."""
        c = self.p[self.i]
        self.i += 1
        if c != "\\":
            return ord(c), ""
        d = self.peek()
        if d in _CLASS_BODY:
            self.i += 1
            return None, _CLASS_BODY[d]
        if d == "b":
            self.i += 1
            return 8, ""
        if d == "-":
            self.i += 1
            return ord("-"), ""
        if d == "B" and not self.u:
            self.i += 1
            return ord("B"), ""
        cp = self.escape_code_point()
        return (ord("\\"), "") if cp is None else (cp, "")

    def char_class(self) -> str:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        parts: list[str] = []
        while True:
            if self.i >= len(self.p):
                raise self.error("unterminated character class")
            if self.peek() == "]":
                self.i += 1
                break
            lo, body = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi, hbody = self.class_atom()
                if lo is None or hi is None:
                    if self.u:
                        raise self.error("class escape in a range")
                    parts.append(body if lo is None else _cls_char(lo))
                    parts.append(r"\-")
                    parts.append(hbody if hi is None else _cls_char(hi))
                    continue
                if lo > hi:
                    raise self.error("range out of order in character class")
                parts.append(_cls_char(lo) + "-" + _cls_char(hi))
            else:
                parts.append(body if lo is None else _cls_char(lo))
        if not parts:
            return r"[\s\S]" if negate else "(?!)"
        return ("[^" if negate else "[") + "".join(parts) + "]"


def compile_js(pattern: str, flags: str) -> re.Pattern[str]:
    """Compiles a JS pattern; RegexError names the field (pattern or flags) at fault."""
    check_flags(flags)
    if pattern == "":
        raise RegexError("pattern", "empty pattern")
    translated = _Translator(pattern, flags).translate()
    try:
        return re.compile(translated, re.IGNORECASE if "i" in flags else 0)
    except re.error as exc:
        raise RegexError("pattern", str(exc)) from exc


# ---------------------------------------------------------------- globs (SPEC §9.8)


def compile_glob(glob: str, ignore_case: bool) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(glob):
        c = glob[i]
        i += 1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "\\" and i < len(glob):
            out.append(re.escape(glob[i]))
            i += 1
        elif c == "[":
            negate = i < len(glob) and glob[i] in "!^"
            if negate:
                i += 1
            items: list[str] = []
            first = True
            while True:
                if i >= len(glob):
                    raise ValueError(f"unterminated class in glob {glob!r}")
                ch = glob[i]
                if ch == "]" and not first:
                    i += 1
                    break
                first = False
                if ch == "\\" and i + 1 < len(glob):
                    i += 1
                    ch = glob[i]
                i += 1
                if i + 1 < len(glob) and glob[i] == "-" and glob[i + 1] != "]":
                    hi = glob[i + 1]
                    i += 2
                    if hi == "\\" and i < len(glob):
                        hi = glob[i]
                        i += 1
                    items.append(_cls_char(ord(ch)) + "-" + _cls_char(ord(hi)))
                else:
                    items.append(_cls_char(ord(ch)))
            out.append(("[^" if negate else "[") + "".join(items) + "]")
        else:
            out.append(re.escape(c))
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    try:
        return re.compile("".join(out), flags)
    except re.error as exc:
        raise ValueError(str(exc)) from exc


def compile_name(name: str, ignore_case: bool) -> re.Pattern[str]:
    return re.compile(re.escape(name), re.DOTALL | (re.IGNORECASE if ignore_case else 0))
