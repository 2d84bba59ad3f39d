//! JavaScript `RegExp` (the linear-time subset) translated onto the `regex` crate.
//!
//! A small recursive-descent parser reads the JS pattern (ECMA-262 with Annex B when the `u`
//! flag is off) and emits `regex` syntax in which every construct is spelled out explicitly,
//! so nothing depends on where the two dialects happen to agree: `\d \w \s`, `.`, `^ $` and
//! `\b` become explicit classes and assertions, literals are escaped, groups become
//! non-capturing (only `is_match` is ever asked). Constructs that need backtracking
//! (backreferences, look-around) are rejected with a message naming them.
//!
//! Deliberate differences from JS (SPEC §9.28), and the ones left:
//! * Matching is over code points with or without `u`; `y` does not anchor; `g`/`d` do nothing.
//!   A surrogate pair written as two `\u` escapes is one code point; a lone surrogate escape
//!   matches nothing (the text is valid UTF-8, lone surrogates are `\udxxx` escapes in it).
//! * `i` uses Unicode simple case folding, which is exactly JS with `u`. Without `u`, JS
//!   canonicalises with `toUpperCase` and never maps a non-ASCII character to an ASCII one, so
//!   a few pairs match here but not in JS: `ſ` (U+017F) ~ `s`, Kelvin sign (U+212A) ~ `k`,
//!   Ohm sign (U+2126) ~ `ω`, `ẞ` (U+1E9E) ~ `ß`, and a handful of similar folds (this also
//!   moves `ſ` and the Kelvin sign into `\w`/`[a-z]` and out of `\W`/`[^a-z]` under `i`). With `u` and `i`, JS
//!   counts `ſ` and the Kelvin sign as word characters for `\b`; here `\b` stays ASCII.
//! * `\p{..}` (with `u`) is handed to the `regex` crate, which also accepts loose spellings of
//!   property names (case, `_`, spaces) that JS rejects.
//! * With `m`, `^`/`$` are line anchors at `\n \r U+2028 U+2029`. The `regex` crate only knows
//!   `\n`/`\r`, so when the text holds U+2028/U+2029 a second program, compiled with those two
//!   characters swapped for `\r`/`\n` throughout, runs on the text with the same swap. That is
//!   exact for canonical JSON text (which never holds a raw CR or LF); for a text that holds
//!   both a raw CR/LF and U+2028/U+2029, the raw CR/LF then stop being line ends. `\r\n` and
//!   U+2029 U+2028 count as one line end, where JS sees an empty line between.
use std::fmt::Write as _;

use regex_syntax::hir::{self, Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind};

/// Which suite field a regex problem belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegexField {
    Pattern,
    Flags,
}

/// A pattern or flags string that cannot be compiled, with a message naming the construct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegexError {
    pub field: RegexField,
    pub message: String,
}

impl std::fmt::Display for RegexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RegexError {}

/// A compiled JS-subset regular expression.
#[derive(Clone, Debug)]
pub struct JsRegex {
    inner: regex::Regex,
    /// With `m` and a line anchor: the program for texts that hold U+2028/U+2029 (see above).
    separators_swapped: Option<regex::Regex>,
}

/// The `regex` syntax for each JS class escape. JS `\s` is `WhiteSpace` plus `LineTerminator`.
const DIGIT: &str = "0-9";
const WORD: &str = "0-9A-Za-z_";
const SPACE: &str = r"\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";
/// Matches nothing: JS `[]`, or a lone surrogate (never present in UTF-8 text).
const NOTHING: &str = r"[^\x00-\x{10FFFF}]";
const ANYTHING: &str = r"[\x00-\x{10FFFF}]";
/// Group nesting cap: keeps the recursive parser's stack bounded (the `regex` crate's own
/// nest limit is 250 too).
const MAX_NESTING: usize = 250;

#[derive(Clone, Copy, Default)]
#[allow(clippy::struct_excessive_bools)] // one field per JS flag that changes matching
struct Flags {
    ignore_case: bool,
    multiline: bool,
    dot_all: bool,
    unicode: bool,
}

fn parse_flags(flags: &str) -> Result<Flags, RegexError> {
    let err = |message: String| RegexError { field: RegexField::Flags, message };
    let mut f = Flags::default();
    let mut seen = String::new();
    for c in flags.chars() {
        if seen.contains(c) {
            return Err(err(format!("duplicate flag '{c}'")));
        }
        seen.push(c);
        match c {
            'i' => f.ignore_case = true,
            'm' => f.multiline = true,
            's' => f.dot_all = true,
            'u' => f.unicode = true,
            // Accepted, no effect on a test (SPEC §2, §9.28).
            'g' | 'y' | 'd' => {}
            'v' => return Err(err("the v flag is not supported (use u)".to_owned())),
            _ => return Err(err(format!("unknown flag '{c}' (allowed: d g i m s u y)"))),
        }
    }
    Ok(f)
}

impl JsRegex {
    /// Compiles `pattern` with JS `flags`; `size_limit` caps the compiled program in bytes.
    pub fn compile(pattern: &str, flags: &str, size_limit: usize) -> Result<JsRegex, RegexError> {
        let flags = parse_flags(flags)?;
        let translated = translate_with(pattern, flags)?;
        let inner = build(&translated.regex, size_limit)?;
        let separators_swapped = if translated.line_anchors {
            let hir = regex_syntax::ParserBuilder::new()
                .build()
                .parse(&translated.regex)
                .map_err(|e| pattern_error(format!("internal translation error: {e}")))?;
            Some(build(&swap_separators(&hir).to_string(), size_limit)?)
        } else {
            None
        };
        Ok(JsRegex { inner, separators_swapped })
    }

    /// True when the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        match &self.separators_swapped {
            Some(swapped) if text.contains('\u{2028}') || text.contains('\u{2029}') => {
                let mapped: String = text.chars().map(swap_char).collect();
                swapped.is_match(&mapped)
            }
            _ => self.inner.is_match(text),
        }
    }
}

fn build(regex: &str, size_limit: usize) -> Result<regex::Regex, RegexError> {
    regex::RegexBuilder::new(regex)
        .unicode(true)
        .size_limit(size_limit)
        .dfa_size_limit(size_limit)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(limit) => pattern_error(format!(
                "the compiled pattern is larger than the regex size limit of {limit} bytes"
            )),
            other => pattern_error(format!("pattern not supported: {other}")),
        })
}

fn pattern_error(message: String) -> RegexError {
    RegexError { field: RegexField::Pattern, message }
}

/// A construct the linear-time engine cannot run, named for the suite author.
#[cold]
fn unsupported(what: &str, at: usize) -> RegexError {
    pattern_error(format!(
        "{what} is not supported (matching is linear-time, without backtracking) at position {at}"
    ))
}

/// The swap that turns JS line terminators U+2028/U+2029 into ones the `regex` crate knows.
/// It is a permutation, so matching the swapped program on the swapped text is matching the
/// original program on the original text, with the anchors now seeing every JS line end.
fn swap_char(c: char) -> char {
    match c {
        '\n' => '\u{2028}',
        '\u{2028}' => '\n',
        '\r' => '\u{2029}',
        '\u{2029}' => '\r',
        c => c,
    }
}

fn swap_class(class: &ClassUnicode) -> ClassUnicode {
    let has = |c: char| class.ranges().iter().any(|r| r.start() <= c && c <= r.end());
    let mut out = class.clone();
    let four = ClassUnicode::new(
        ['\n', '\r', '\u{2028}', '\u{2029}'].map(|c| ClassUnicodeRange::new(c, c)),
    );
    out.difference(&four);
    for c in ['\n', '\r', '\u{2028}', '\u{2029}'] {
        if has(c) {
            let s = swap_char(c);
            out.push(ClassUnicodeRange::new(s, s));
        }
    }
    out
}

fn swap_separators(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(hir::Literal(bytes)) => {
            let s = String::from_utf8_lossy(bytes);
            let swapped: String = s.chars().map(swap_char).collect();
            Hir::literal(swapped.into_bytes())
        }
        HirKind::Class(Class::Unicode(c)) => Hir::class(Class::Unicode(swap_class(c))),
        HirKind::Class(Class::Bytes(c)) => Hir::class(Class::Bytes(c.clone())),
        HirKind::Look(look) => Hir::look(*look),
        HirKind::Repetition(r) => Hir::repetition(hir::Repetition {
            min: r.min,
            max: r.max,
            greedy: r.greedy,
            sub: Box::new(swap_separators(&r.sub)),
        }),
        HirKind::Capture(c) => Hir::capture(hir::Capture {
            index: c.index,
            name: c.name.clone(),
            sub: Box::new(swap_separators(&c.sub)),
        }),
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(swap_separators).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(swap_separators).collect()),
    }
}

struct Translated {
    regex: String,
    line_anchors: bool,
}

fn translate_with(pattern: &str, flags: Flags) -> Result<Translated, RegexError> {
    let src: Vec<char> = pattern.chars().collect();
    let (group_count, has_named_groups) = scan_groups(&src);
    let mut t = Translator {
        src,
        pos: 0,
        flags,
        out: String::with_capacity(pattern.len() * 2 + 8),
        group_count,
        has_named_groups,
        names: Vec::new(),
        depth: 0,
        line_anchors: false,
    };
    if flags.ignore_case {
        t.out.push_str("(?i)");
    }
    t.disjunction()?;
    if t.pos < t.src.len() {
        // Only an unmatched ')' stops the top-level disjunction early.
        return Err(t.error("unmatched ')'"));
    }
    Ok(Translated { regex: t.out, line_anchors: t.line_anchors })
}

/// Counts capturing groups in the whole pattern, as JS does before it resolves `\N`.
fn scan_groups(src: &[char]) -> (u32, bool) {
    let (mut count, mut named) = (0u32, false);
    let mut i = 0;
    let mut in_class = false;
    while i < src.len() {
        match src[i] {
            '\\' => i += 1,
            '[' => in_class = true,
            ']' => in_class = false,
            '(' if !in_class => {
                if src.get(i + 1) != Some(&'?') {
                    count += 1;
                } else if src.get(i + 2) == Some(&'<') && !matches!(src.get(i + 3), Some('=' | '!'))
                {
                    count += 1;
                    named = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    (count, named)
}

/// One parsed class atom: a single code point or a class escape (already in `regex` syntax).
enum ClassAtom {
    Char(u32),
    Set(String),
}

struct Translator {
    src: Vec<char>,
    pos: usize,
    flags: Flags,
    out: String,
    group_count: u32,
    has_named_groups: bool,
    names: Vec<String>,
    depth: usize,
    line_anchors: bool,
}

impl Translator {
    fn peek(&self) -> Option<char> {
        self.src.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.src.get(self.pos + offset).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    #[cold]
    fn error(&self, what: &str) -> RegexError {
        pattern_error(format!("invalid regular expression: {what} at position {}", self.pos))
    }

    fn disjunction(&mut self) -> Result<(), RegexError> {
        self.alternative()?;
        while self.eat('|') {
            self.out.push('|');
            self.alternative()?;
        }
        Ok(())
    }

    fn alternative(&mut self) -> Result<(), RegexError> {
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            self.term()?;
        }
        Ok(())
    }

    fn term(&mut self) -> Result<(), RegexError> {
        let start = self.pos;
        let c = self.peek().unwrap_or_default();
        match c {
            '^' | '$' => {
                self.pos += 1;
                let anchor = match (c, self.flags.multiline) {
                    ('^', false) => r"\A",
                    ('$', false) => r"\z",
                    ('^', true) => "(?mR:^)",
                    _ => "(?mR:$)",
                };
                self.line_anchors |= self.flags.multiline;
                self.out.push_str(anchor);
                return self.no_quantifier();
            }
            '\\' if matches!(self.peek_at(1), Some('b' | 'B')) => {
                self.pos += 2;
                // JS \b is defined over the ASCII word characters [0-9A-Za-z_].
                self.out.push_str(if self.src[self.pos - 1] == 'b' {
                    r"(?-u:\b)"
                } else {
                    r"(?-u:\B)"
                });
                return self.no_quantifier();
            }
            '(' => self.group()?,
            '[' => self.class()?,
            '.' => {
                self.pos += 1;
                self.out.push_str(if self.flags.dot_all {
                    ANYTHING
                } else {
                    r"[^\n\r\x{2028}\x{2029}]"
                });
            }
            '*' | '+' | '?' => return Err(self.error("nothing to repeat")),
            '{' => {
                if self.braced_quantifier_len().is_some() {
                    return Err(self.error("nothing to repeat"));
                }
                if self.flags.unicode {
                    return Err(self.error("lone quantifier bracket '{'"));
                }
                // Annex B: a '{' that does not start a quantifier is a literal.
                self.pos += 1;
                push_char(&mut self.out, '{');
            }
            '}' | ']' => {
                if self.flags.unicode {
                    return Err(self.error(&format!("lone '{c}'")));
                }
                self.pos += 1;
                push_char(&mut self.out, c);
            }
            '\\' => self.atom_escape()?,
            _ => {
                self.pos += 1;
                push_char(&mut self.out, c);
            }
        }
        debug_assert!(self.pos > start);
        self.quantifier()
    }

    /// After an assertion: JS has nothing to repeat there.
    fn no_quantifier(&self) -> Result<(), RegexError> {
        match self.peek() {
            Some('*' | '+' | '?') => Err(self.error("nothing to repeat")),
            Some('{') if self.braced_quantifier_len().is_some() => {
                Err(self.error("nothing to repeat"))
            }
            _ => Ok(()),
        }
    }

    /// The length of a syntactically valid `{n}`, `{n,}` or `{n,m}` at the cursor.
    fn braced_quantifier_len(&self) -> Option<usize> {
        let mut i = self.pos;
        if self.src.get(i) != Some(&'{') {
            return None;
        }
        i += 1;
        let digits = |mut i: usize| {
            let start = i;
            while self.src.get(i).is_some_and(char::is_ascii_digit) {
                i += 1;
            }
            (i > start).then_some(i)
        };
        i = digits(i)?;
        if self.src.get(i) == Some(&',') {
            i += 1;
            if let Some(j) = digits(i) {
                i = j;
            }
        }
        (self.src.get(i) == Some(&'}')).then(|| i + 1 - self.pos)
    }

    fn quantifier(&mut self) -> Result<(), RegexError> {
        match self.peek() {
            Some(c @ ('*' | '+' | '?')) => {
                self.pos += 1;
                self.out.push(c);
            }
            Some('{') => {
                let Some(len) = self.braced_quantifier_len() else {
                    if self.flags.unicode {
                        return Err(self.error("incomplete quantifier"));
                    }
                    // Annex B: not a quantifier; the next term reads '{' as a literal.
                    return Ok(());
                };
                let body: String = self.src[self.pos + 1..self.pos + len - 1].iter().collect();
                let number = |s: &str| -> u64 {
                    // JS allows any size; the compiled-size limit rejects huge counts later.
                    s.parse::<u64>().unwrap_or(u64::MAX).min(u64::from(u32::MAX))
                };
                let (min, max) = match body.split_once(',') {
                    None => (number(&body), Some(number(&body))),
                    Some((lo, "")) => (number(lo), None),
                    Some((lo, hi)) => (number(lo), Some(number(hi))),
                };
                if max.is_some_and(|m| m < min) {
                    return Err(self.error("numbers out of order in {} quantifier"));
                }
                self.pos += len;
                // Writing to a String cannot fail.
                let _ = match max {
                    Some(m) if m == min => write!(self.out, "{{{min}}}"),
                    Some(m) => write!(self.out, "{{{min},{m}}}"),
                    None => write!(self.out, "{{{min},}}"),
                };
            }
            _ => return Ok(()),
        }
        if self.eat('?') {
            self.out.push('?');
        }
        Ok(())
    }

    fn group(&mut self) -> Result<(), RegexError> {
        let start = self.pos;
        self.pos += 1; // '('
        if self.eat('?') {
            match (self.peek(), self.peek_at(1)) {
                (Some(':'), _) => self.pos += 1,
                (Some('=' | '!'), _) => return Err(unsupported("look-ahead", start)),
                (Some('<'), Some('=' | '!')) => {
                    return Err(unsupported("look-behind", start));
                }
                (Some('<'), _) => {
                    self.pos += 1;
                    self.group_name()?;
                }
                _ => return Err(self.error("invalid group")),
            }
        }
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error(&format!("groups nested deeper than {MAX_NESTING}")));
        }
        // Non-capturing: only is_match is asked, and capture slots cost time.
        self.out.push_str("(?:");
        self.disjunction()?;
        if !self.eat(')') {
            return Err(self.error("unterminated group"));
        }
        self.out.push(')');
        self.depth -= 1;
        Ok(())
    }

    /// Reads `name>` after `(?<`: a JS `RegExpIdentifierName`, unique in the pattern.
    fn group_name(&mut self) -> Result<(), RegexError> {
        let mut name = String::new();
        loop {
            let c = match self.peek() {
                None => return Err(self.error("unterminated group name")),
                Some('>') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') if self.peek_at(1) == Some('u') => {
                    self.pos += 2;
                    let cp = self
                        .unicode_escape_body(true)
                        .ok_or_else(|| self.error("invalid escape in group name"))?;
                    char::from_u32(cp).ok_or_else(|| self.error("invalid group name"))?
                }
                Some(c) => {
                    self.pos += 1;
                    c
                }
            };
            let ok = if name.is_empty() {
                c.is_alphabetic() || c == '$' || c == '_'
            } else {
                c.is_alphanumeric() || matches!(c, '$' | '_' | '\u{200C}' | '\u{200D}')
            };
            if !ok {
                return Err(self.error("invalid group name"));
            }
            name.push(c);
        }
        if name.is_empty() {
            return Err(self.error("invalid group name"));
        }
        if self.names.contains(&name) {
            return Err(self.error(&format!("duplicate group name '{name}'")));
        }
        self.names.push(name);
        Ok(())
    }

    /// After `\u`: 4 hex digits (joining a following `\uDC00`-style low surrogate), or with
    /// `braces` allowed, `{hex}`. `None` when the escape is malformed.
    fn unicode_escape_body(&mut self, braces: bool) -> Option<u32> {
        if braces && self.peek() == Some('{') {
            let mut i = self.pos + 1;
            let mut v: u32 = 0;
            while let Some(d) = self.src.get(i).and_then(|c| c.to_digit(16)) {
                v = v.saturating_mul(16).saturating_add(d);
                i += 1;
            }
            if i == self.pos + 1 || self.src.get(i) != Some(&'}') || v > 0x10_FFFF {
                return None;
            }
            self.pos = i + 1;
            return Some(v);
        }
        let first = self.hex_digits(self.pos, 4)?;
        self.pos += 4;
        if (0xD800..0xDC00).contains(&first)
            && self.peek() == Some('\\')
            && self.peek_at(1) == Some('u')
        {
            if let Some(second) = self.hex_digits(self.pos + 2, 4) {
                if (0xDC00..0xE000).contains(&second) {
                    self.pos += 6;
                    return Some(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00));
                }
            }
        }
        Some(first)
    }

    fn hex_digits(&self, at: usize, n: usize) -> Option<u32> {
        let digits = self.src.get(at..at + n)?;
        digits.iter().try_fold(0u32, |v, c| Some(v * 16 + c.to_digit(16)?))
    }

    /// An escape outside a class, after checking for `\b`/`\B`.
    fn atom_escape(&mut self) -> Result<(), RegexError> {
        let start = self.pos;
        self.pos += 1; // '\'
        let Some(c) = self.peek() else {
            return Err(self.error("\\ at end of pattern"));
        };
        match c {
            'k' => return Err(unsupported("a named backreference (\\k)", start)),
            '1'..='9' => {
                let mut end = self.pos;
                while self.src.get(end).is_some_and(char::is_ascii_digit) {
                    end += 1;
                }
                let text: String = self.src[self.pos..end].iter().collect();
                let n = text.parse::<u64>().unwrap_or(u64::MAX);
                if n <= u64::from(self.group_count) {
                    return Err(unsupported("a backreference", start));
                }
                if self.flags.unicode {
                    return Err(self.error("invalid escape (no such group)"));
                }
                if matches!(c, '8' | '9') {
                    // Annex B identity escape: \8 is "8".
                    self.pos += 1;
                    push_char(&mut self.out, c);
                } else {
                    return Err(unsupported("a legacy octal escape", start));
                }
            }
            _ => match self.class_atom_escape(false)? {
                ClassAtom::Char(cp) => push_code_point(&mut self.out, cp),
                ClassAtom::Set(set) => {
                    self.out.push('[');
                    self.out.push_str(&set);
                    self.out.push(']');
                }
            },
        }
        Ok(())
    }

    /// Escapes shared by atoms and classes; the cursor is just after the `\`.
    fn class_atom_escape(&mut self, in_class: bool) -> Result<ClassAtom, RegexError> {
        let start = self.pos - 1;
        let c = self.peek().ok_or_else(|| self.error("\\ at end of pattern"))?;
        self.pos += 1;
        let u = self.flags.unicode;
        let atom = match c {
            'd' => ClassAtom::Set(DIGIT.to_owned()),
            'D' => ClassAtom::Set(format!("[^{DIGIT}]")),
            'w' => ClassAtom::Set(WORD.to_owned()),
            'W' => ClassAtom::Set(format!("[^{WORD}]")),
            's' => ClassAtom::Set(SPACE.to_owned()),
            'S' => ClassAtom::Set(format!("[^{SPACE}]")),
            'f' => ClassAtom::Char(0x0C),
            'n' => ClassAtom::Char(0x0A),
            'r' => ClassAtom::Char(0x0D),
            't' => ClassAtom::Char(0x09),
            'v' => ClassAtom::Char(0x0B),
            'b' => ClassAtom::Char(0x08), // only reached inside a class
            '0' if !self.peek().is_some_and(|d| d.is_ascii_digit()) => ClassAtom::Char(0),
            '0'..='7' if !u => return Err(unsupported("a legacy octal escape", start)),
            '8' | '9' if !u => ClassAtom::Char(u32::from(c)),
            '0'..='9' => return Err(self.error("invalid escape")),
            'c' => {
                let letter = self.peek().filter(|l| {
                    l.is_ascii_alphabetic() || (in_class && !u && (l.is_ascii_digit() || *l == '_'))
                });
                if let Some(l) = letter {
                    self.pos += 1;
                    ClassAtom::Char(u32::from(l) % 32)
                } else if u {
                    return Err(self.error("invalid control escape \\c"));
                } else {
                    // Annex B: the backslash is literal and 'c' is read next.
                    self.pos -= 1;
                    ClassAtom::Char(u32::from('\\'))
                }
            }
            'x' => match self.hex_digits(self.pos, 2) {
                Some(v) => {
                    self.pos += 2;
                    ClassAtom::Char(v)
                }
                None if u => return Err(self.error("invalid \\x escape")),
                None => ClassAtom::Char(u32::from('x')),
            },
            'u' => match self.unicode_escape_body(u) {
                Some(v) => ClassAtom::Char(v),
                None if u => return Err(self.error("invalid \\u escape")),
                None => ClassAtom::Char(u32::from('u')),
            },
            'p' | 'P' if u => {
                if !self.eat('{') {
                    return Err(self.error("invalid property escape"));
                }
                let mut name = String::new();
                loop {
                    match self.peek() {
                        Some('}') => {
                            self.pos += 1;
                            break;
                        }
                        Some(ch) if ch.is_ascii_alphanumeric() || ch == '_' || ch == '=' => {
                            self.pos += 1;
                            name.push(ch);
                        }
                        _ => return Err(self.error("invalid property name")),
                    }
                }
                if name.is_empty() {
                    return Err(self.error("invalid property name"));
                }
                // Check the name now, so the error points at the property, not the program.
                if regex_syntax::Parser::new().parse(&format!(r"\p{{{name}}}")).is_err() {
                    return Err(self.error(&format!("unknown Unicode property '{name}'")));
                }
                ClassAtom::Set(format!(r"\{c}{{{name}}}"))
            }
            '-' if in_class => ClassAtom::Char(u32::from('-')),
            'k' if in_class && (u || self.has_named_groups) => {
                return Err(self.error("invalid escape \\k"));
            }
            c if u => {
                if "^$\\.*+?()[]{}|/".contains(c) {
                    ClassAtom::Char(u32::from(c))
                } else {
                    return Err(self.error(&format!("invalid escape \\{c}")));
                }
            }
            // Annex B identity escape: \e is "e".
            c => ClassAtom::Char(u32::from(c)),
        };
        Ok(atom)
    }

    fn class_atom(&mut self) -> Result<ClassAtom, RegexError> {
        let c = self.peek().ok_or_else(|| self.error("unterminated character class"))?;
        self.pos += 1;
        if c == '\\' {
            if self.peek().is_none() {
                return Err(self.error("\\ at end of pattern"));
            }
            self.class_atom_escape(true)
        } else {
            Ok(ClassAtom::Char(u32::from(c)))
        }
    }

    fn class(&mut self) -> Result<(), RegexError> {
        self.pos += 1; // '['
        let negated = self.eat('^');
        let mut body = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error("unterminated character class")),
                Some(']') => {
                    self.pos += 1;
                    break;
                }
                _ => {}
            }
            let first = self.class_atom()?;
            let is_range = self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']');
            if !is_range {
                push_class_atom(&mut body, &first);
                continue;
            }
            self.pos += 1; // '-'
            let second = self.class_atom()?;
            match (&first, &second) {
                (ClassAtom::Char(lo), ClassAtom::Char(hi)) => {
                    if lo > hi {
                        return Err(self.error("range out of order in character class"));
                    }
                    push_class_range(&mut body, *lo, *hi);
                }
                _ if self.flags.unicode => {
                    return Err(self.error("invalid character class range"));
                }
                _ => {
                    // Annex B: a range with a class escape at either end is a union with '-'.
                    push_class_atom(&mut body, &first);
                    push_class_atom(&mut body, &ClassAtom::Char(u32::from('-')));
                    push_class_atom(&mut body, &second);
                }
            }
        }
        match (body.is_empty(), negated) {
            (true, false) => self.out.push_str(NOTHING),
            (true, true) => self.out.push_str(ANYTHING),
            (false, _) => {
                self.out.push('[');
                if negated {
                    self.out.push('^');
                }
                self.out.push_str(&body);
                self.out.push(']');
            }
        }
        Ok(())
    }
}

fn push_class_atom(body: &mut String, atom: &ClassAtom) {
    match atom {
        ClassAtom::Char(cp) => push_class_range(body, *cp, *cp),
        ClassAtom::Set(set) if set.starts_with('[') => body.push_str(set),
        // A bare set body such as `0-9`: nest it so it cannot merge with a neighbour.
        ClassAtom::Set(set) => {
            body.push('[');
            body.push_str(set);
            body.push(']');
        }
    }
}

/// Appends a code-point range to a class body, leaving out surrogates (never in UTF-8 text).
fn push_class_range(body: &mut String, lo: u32, hi: u32) {
    let lo = if (0xD800..0xE000).contains(&lo) { 0xE000 } else { lo };
    let hi = if (0xD800..0xE000).contains(&hi) { 0xD7FF } else { hi };
    if lo > hi {
        return;
    }
    // A range spanning the surrogate block is fine: regex classes are over scalar values.
    let (Some(lo_c), Some(hi_c)) = (char::from_u32(lo), char::from_u32(hi)) else {
        return;
    };
    push_char(body, lo_c);
    if hi != lo {
        body.push('-');
        push_char(body, hi_c);
    }
}

fn push_code_point(out: &mut String, cp: u32) {
    match char::from_u32(cp) {
        Some(c) => push_char(out, c),
        None => out.push_str(NOTHING),
    }
}

/// Appends one literal character in `regex` syntax: meta characters escaped, anything that is
/// not printable ASCII as `\x{..}` (never a bare control character or a `\<`-style escape).
fn push_char(out: &mut String, c: char) {
    if regex_syntax::is_meta_character(c) {
        out.push('\\');
        out.push(c);
    } else if c.is_ascii_graphic() || c == ' ' {
        out.push(c);
    } else {
        let _ = write!(out, r"\x{{{:X}}}", u32::from(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1 << 20;

    fn re(pattern: &str, flags: &str) -> JsRegex {
        JsRegex::compile(pattern, flags, LIMIT)
            .unwrap_or_else(|e| panic!("/{pattern}/{flags}: {}", e.message))
    }

    fn matches(pattern: &str, flags: &str, text: &str) -> bool {
        re(pattern, flags).is_match(text)
    }

    fn err(pattern: &str, flags: &str) -> RegexError {
        match JsRegex::compile(pattern, flags, LIMIT) {
            Ok(r) => panic!("/{pattern}/{flags} compiled to {}", r.inner.as_str()),
            Err(e) => e,
        }
    }

    fn pattern_err(pattern: &str, flags: &str, needle: &str) {
        let e = err(pattern, flags);
        assert_eq!(e.field, RegexField::Pattern, "/{pattern}/{flags}: {}", e.message);
        assert!(e.message.contains(needle), "/{pattern}/{flags}: {:?} lacks {needle:?}", e.message);
    }

    #[test]
    fn flags() {
        for bad in ["x", "ii", "v", "uv", "gg", "I", " "] {
            assert_eq!(err("a", bad).field, RegexField::Flags, "{bad}");
        }
        assert!(err("a", "ii").message.contains("duplicate"));
        assert!(err("a", "v").message.contains("v flag"));
        assert!(matches("abc", "gyd", "xxabcxx"), "y does not anchor");
        assert!(matches("a", "dgimsuy", "A"));
    }

    #[test]
    fn unsupported_constructs_are_named() {
        pattern_err("amount(?=_cents)", "", "look-ahead");
        pattern_err("a(?!b)", "u", "look-ahead");
        pattern_err("(?<=a)b", "", "look-behind");
        pattern_err("(?<!a)b", "", "look-behind");
        pattern_err("(a)\\1", "", "backreference");
        pattern_err("\\1(a)", "", "backreference");
        pattern_err("(?<x>a)\\k<x>", "", "named backreference");
        pattern_err("\\k<x>", "u", "named backreference");
        pattern_err("\\1", "", "legacy octal");
        pattern_err("\\07", "", "legacy octal");
        pattern_err("[\\1]", "", "legacy octal");
    }

    #[test]
    fn syntax_errors() {
        for (p, f, needle) in [
            ("(a", "", "unterminated group"),
            ("a)", "", "unmatched ')'"),
            ("*a", "", "nothing to repeat"),
            ("a**", "", "nothing to repeat"),
            ("+", "", "nothing to repeat"),
            ("a|?", "", "nothing to repeat"),
            ("^*", "", "nothing to repeat"),
            ("\\b+", "", "nothing to repeat"),
            ("{2}", "", "nothing to repeat"),
            ("a{2,1}", "", "out of order"),
            ("[z-a]", "", "out of order"),
            ("[a", "", "unterminated character class"),
            ("a\\", "", "end of pattern"),
            ("(?i:a)", "", "invalid group"),
            ("(?<1a>x)", "", "group name"),
            ("(?<a>x)(?<a>y)", "", "duplicate group name"),
            ("\\e", "u", "invalid escape"),
            ("\\-", "u", "invalid escape"),
            ("{", "u", "lone quantifier"),
            ("a{1", "u", "incomplete quantifier"),
            ("}", "u", "lone"),
            ("]", "u", "lone"),
            ("\\1", "u", "invalid escape"),
            ("\\c1", "u", "control"),
            ("\\x1", "u", "\\x"),
            ("\\u12", "u", "\\u"),
            ("\\u{110000}", "u", "\\u"),
            ("[\\d-z]", "u", "range"),
            ("\\p{NoSuchProperty}", "u", "property"),
        ] {
            pattern_err(p, f, needle);
        }
    }

    #[test]
    fn annex_b_without_u() {
        assert!(matches("\"\\e\"", "", "\"e\""));
        assert!(matches("\"a\":{\"b\"", "", "{\"a\":{\"b\":1}}"));
        assert!(matches("a{,2}", "", "a{,2}"));
        assert!(matches("a{1", "", "a{1"));
        assert!(matches("x}]", "", "x}]"));
        assert!(matches("[]]", "", "]") == matches("[]]", "", "x"), "[] matches nothing");
        assert!(!matches("[]]", "", "]"));
        assert!(matches("[^]", "", "\n"));
        assert!(matches("\\8", "", "8"));
        assert!(matches("\\c", "", "\\c"));
        assert!(matches("\\cJ", "", "\n"));
        assert!(matches("[\\c_]", "", "\u{1f}"));
        assert!(matches("\\x4g", "", "x4g"));
        assert!(matches("\\u{2}", "", "uu"), "without u, \\u{{2}} is u twice");
        assert!(matches("\\p{L}", "", "p{L}"));
        assert!(matches("[\\d-z]", "", "-"));
        assert!(matches("[\\d-z]", "", "5"));
        assert!(!matches("[\\d-z]", "", "m"));
        pattern_err("\\k", "", "named backreference"); // SPEC §9.28: \k always rejected
        assert!(matches("/\\//", "", "///"));
    }

    #[test]
    fn escapes() {
        assert!(matches("\\u00e9", "", "é"));
        assert!(matches("\\u{1F600}", "u", "😀"));
        assert!(matches("^\\ud83d\\ude00$", "", "😀"), "a pair of escapes is one code point");
        assert!(!matches("\\ud800", "", "\\ud800"), "a lone surrogate matches no character");
        assert!(matches("[\\ud800a]", "", "a"));
        assert!(matches("\\x41\\t\\n\\v\\f\\r\\0", "", "A\t\n\u{b}\u{c}\r\0"));
        assert!(matches("[\\b]", "", "\u{8}"));
        assert!(matches("\\p{Lu}", "u", "É"));
        assert!(!matches("\\P{L}", "u", "É"));
        assert!(matches("[\\p{Greek}\\d]", "u", "λ"));
        assert!(matches("\\$\\^\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\/", "u", "$^.*+?()[]{}|/"));
        assert!(matches("[\\-]", "u", "-"));
        // Characters the regex crate would read specially are escaped.
        assert!(matches("a#b", "", "a#b"));
        assert!(matches("[&&]", "", "&"));
        assert!(matches("[~-~]", "", "~"));
        assert!(matches("<a>", "", "<a>"));
        assert!(matches("a b", "", "a b"));
    }

    #[test]
    fn ascii_classes_and_unicode_space() {
        assert!(!matches("\"n\":\"\\d", "", "{\"n\":\"٣\"}"));
        assert!(!matches("\"s\":\"\\w\"", "", "{\"s\":\"é\"}"));
        assert!(matches("\\W", "", "é"));
        assert!(matches("caf\\b", "", "café"));
        assert!(matches("\\bé", "", "café"));
        assert!(!matches("\\Bé", "", "café"));
        assert!(matches("\\B", "", "ab"));
        assert!(matches("^\\s+$", "", " \t\u{a0}\u{feff}\u{2028}\u{3000}\u{b}\u{c}"));
        assert!(!matches("\\s", "", "\u{85}"), "U+0085 is not JS whitespace");
        assert!(!matches("\\s", "", "\u{180e}"));
        assert!(matches("\\S", "", "\u{85}"));
        assert!(matches("[\\s\\S]*", "", ""));
        assert!(matches("[^\\d]", "", "٣"));
    }

    #[test]
    fn dot_and_line_terminators() {
        for lt in ["\n", "\r", "\u{2028}", "\u{2029}"] {
            let text = format!("a{lt}b");
            assert!(!matches("a.b", "", &text), "{lt:?}");
            assert!(matches("a.b", "s", &text), "{lt:?}");
            assert!(matches("^b", "m", &text), "{lt:?}");
            assert!(matches("a$", "m", &text), "{lt:?}");
            assert!(!matches("^b", "", &text), "{lt:?}");
            assert!(!matches("a$", "", &text), "{lt:?}");
            assert!(matches("a$\\s^b", "m", &text), "{lt:?}");
            assert!(matches("a[^x]^b", "m", &text), "{lt:?}");
        }
        assert!(matches("a.b", "", "a😀b"), "an astral character is one character");
        assert!(matches("\"e\":\".\"", "", "{\"e\":\"😀\"}"));
        assert!(matches("^a\u{2028}b$", "m", "a\u{2028}b"));
        assert!(!matches("^\\u2028$", "m", "x\u{2028}\u{2028}y"));
        assert!(matches("^\\u2028$", "m", "x\u{2028}\u{2028}\u{2028}y"));
        assert!(!matches("^x$", "m", "ax\u{2028}"));
        assert!(matches("^x$", "m", "a\u{2029}x\u{2028}b"));
        assert!(!matches("^b", "", "a\u{2028}b"));
        assert!(matches("\\n", "m", "a\nb"), "raw LF still matches outside anchors");
    }

    #[test]
    fn case_insensitive() {
        assert!(matches("résumé", "i", "RÉSUMÉ refund"));
        assert!(!matches("REFUND", "", "refund"));
        assert!(matches("[a-z]+", "i", "ABC"));
        assert!(!matches("[^a]", "i", "A"));
        assert!(matches("σ", "iu", "Σ"));
        assert!(matches("ς", "i", "Σ"));
        assert!(matches("\\u212a", "iu", "k"), "Kelvin folds to k with u");
    }

    #[test]
    fn groups_and_quantifiers() {
        let p = "\"code\":\"[A-Z]{2}-[0-9]{4}\",\"method\":\"(?:card|(?<w>wire))\"";
        assert!(matches(p, "", "{\"code\":\"AB-1234\",\"method\":\"wire\"}"));
        assert!(matches("^(ab)+$", "", "ababab"));
        assert!(matches("^a{2,}$", "", "aaa"));
        assert!(!matches("^a{2,3}$", "", "aaaa"));
        assert!(matches("^a{2,3}?$", "", "aaa"));
        assert!(matches("^a*?b+?c??$", "", "aabbb"));
        assert!(matches("a|", "", "zzz"), "empty alternative");
        assert!(matches("()", "", ""));
        assert!(matches("(?<$x_1>a)", "", "a"));
        assert!(matches("(?<\\u0061>a)", "", "a"));
        assert!(matches("^(?:a|b(?:c|d))$", "", "bd"));
        assert!(matches("\\(\\)", "", "()"));
    }

    #[test]
    fn size_limit_is_an_error_naming_the_limit() {
        let e = JsRegex::compile("\\w{1000}\\w{1000}", "", 10_000).unwrap_err();
        assert_eq!(e.field, RegexField::Pattern);
        assert!(e.message.contains("10000"), "{}", e.message);
        let deep = format!("{}a{}", "(".repeat(300), ")".repeat(300));
        pattern_err(&deep, "", "nested");
    }

    #[test]
    fn linear_time_on_catastrophic_patterns() {
        let text = format!("{}!", "a".repeat(50_000));
        assert!(!matches("^(a+)+$", "", &text));
        assert!(!matches("^(a|aa)*$", "", &text));
    }
}
