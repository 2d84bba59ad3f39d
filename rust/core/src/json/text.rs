//! EXACT / SUBSET / PARTIAL matching straight against argument text, without building a
//! `Value` for the actual side (the fast path of `args::Comparison`).
//!
//! The text is first validated with exactly the grammar and depth rule of `parse` (same
//! acceptance, no allocation); invalid text returns `None` so the caller parses it and reports
//! the parser's error. On valid text the comparison follows `compare::matches`: object keys
//! compared as decoded strings, the last duplicate key wins, numbers compared as exact
//! decimals (normalised from the text as `Number::from_json_text` does).
use std::fmt::Write;

use super::compare::{escape_non_ascii, invisible, push_key, show, Diff, Mode};
use super::value::{Number, Object, Str, Value};

/// `Some(matches(expected, parse(text), mode))` when `text` is valid JSON within `max_depth`;
/// `None` otherwise. `text` must not be empty (empty arguments mean `{}`: the caller's job).
pub fn matches_text(expected: &Value, text: &str, mode: Mode, max_depth: usize) -> Option<bool> {
    let start = validate(text.as_bytes(), max_depth)?;
    Some(matches_valid(expected, text, start, mode))
}

/// `matches(expected, parse(text), mode)` for `text` that [`validate`] accepted with first
/// value at `start`.
pub fn matches_valid(expected: &Value, text: &str, start: usize, mode: Mode) -> bool {
    let mut c = Cur { s: text.as_bytes(), i: start };
    match mode {
        Mode::Exact => eq(expected, &mut c),
        Mode::Subset => match expected {
            Value::Object(e) => c.peek() == b'{' && object_match(e, &mut c, false, eq),
            _ => eq(expected, &mut c),
        },
        Mode::Partial => partial(expected, &mut c),
    }
}

/// `Some(diff(expected, parse(text), mode).count)` when `text` is valid JSON within
/// `max_depth` and holds no escaped key where keys must be told apart without the expected
/// side; `None` otherwise (the caller then parses and diffs). Ranks closest-call candidates
/// without parsing them.
pub fn diff_count_text(
    expected: &Value,
    text: &str,
    mode: Mode,
    max_depth: usize,
) -> Option<usize> {
    let start = validate(text.as_bytes(), max_depth)?;
    diff_count_valid(expected, text, start, mode)
}

/// [`diff_count_text`] for `text` that [`validate`] accepted with first value at `start`.
pub fn diff_count_valid(expected: &Value, text: &str, start: usize, mode: Mode) -> Option<usize> {
    let mut c = Cur { s: text.as_bytes(), i: start };
    count(expected, &mut c, mode, true)
}

/// `diff(expected, parse(text), mode)` (count and first difference, the same text) for `text`
/// that [`validate`] accepted with first value at `start`; `None` where [`diff_count_valid`]
/// gives up (the caller then parses and diffs). Only the values a description shows are
/// parsed, and only for the first difference.
pub fn diff_valid(
    expected: &Value,
    text: &str,
    start: usize,
    mode: Mode,
    max_depth: usize,
) -> Option<Diff> {
    let mut d = TextDiffer { text, max_depth, diff: Diff::default(), path: String::from("$") };
    d.walk(expected, &mut Cur { s: text.as_bytes(), i: start }, mode, true)?;
    Some(d.diff)
}

/// `compare::Differ` over text: the same walk, notes and descriptions.
struct TextDiffer<'a> {
    text: &'a str,
    max_depth: usize,
    diff: Diff,
    path: String,
}

impl TextDiffer<'_> {
    /// `show` of the value spanning `text[from..to]` (parsed alone: a value boundary).
    fn shown(&self, from: usize, to: usize) -> Option<String> {
        super::parse(self.text.get(from..to)?, self.max_depth).ok().map(|v| show(&v))
    }

    /// Counts one difference; `describe` runs only for the first.
    fn note(&mut self, describe: impl FnOnce(&Self) -> Option<String>) -> Option<()> {
        if self.diff.first.is_none() {
            self.diff.first = Some(describe(self)?);
        }
        self.diff.count += 1;
        Some(())
    }

    fn walk(&mut self, e: &Value, c: &mut Cur<'_>, mode: Mode, top: bool) -> Option<()> {
        match (e, c.peek()) {
            (Value::Object(eo), b'{') => {
                let exact = mode == Mode::Exact;
                let child_mode = if mode == Mode::Subset && top { Mode::Exact } else { mode };
                let (last, extra) = object_keys(eo, c, exact)?;
                for ((k, ev), &at) in eo.iter().zip(&last) {
                    let len = self.path.len();
                    push_key(&mut self.path, k);
                    if at == usize::MAX {
                        self.note(|d| {
                            Some(format!(
                                "{} expected {}, got nothing (key missing)",
                                d.path,
                                show(ev)
                            ))
                        })?;
                    } else {
                        self.walk(ev, &mut Cur { s: c.s, i: at }, child_mode, false)?;
                    }
                    self.path.truncate(len);
                }
                for (body, at) in extra {
                    let len = self.path.len();
                    push_key(&mut self.path, &Str::from(std::str::from_utf8(body).ok()?));
                    self.note(|d| {
                        let mut end = Cur { s: c.s, i: at };
                        end.skip();
                        Some(format!("{} is not expected, got {}", d.path, d.shown(at, end.i)?))
                    })?;
                    self.path.truncate(len);
                }
            }
            (Value::Array(ea), b'[') if mode != Mode::Subset || !top => {
                let mut k = 0;
                if c.open() {
                    loop {
                        match ea.get(k) {
                            Some(ev) => {
                                let len = self.path.len();
                                let _ = write!(self.path, "[{k}]");
                                self.walk(ev, c, mode, false)?;
                                self.path.truncate(len);
                            }
                            None => c.skip(),
                        }
                        k += 1;
                        if !c.next() {
                            break;
                        }
                    }
                }
                let (el, al) = (ea.len(), k);
                for _ in 0..el.abs_diff(al) {
                    self.note(|d| Some(format!("{} expected {el} elements, got {al}", d.path)))?;
                }
            }
            _ => {
                let at = c.i;
                let same = eq(e, &mut Cur { s: c.s, i: at });
                c.skip();
                if !same {
                    let end = c.i;
                    self.note(|d| {
                        let (mut es, mut as_) = (show(e), d.shown(at, end)?);
                        if invisible(&es) || invisible(&as_) {
                            (es, as_) = (escape_non_ascii(&es), escape_non_ascii(&as_));
                        }
                        Some(format!("{} expected {es}, got {as_}", d.path))
                    })?;
                }
            }
        }
        Some(())
    }
}

/// A key the expected object does not have (its text) and where its last value starts.
type ExtraKey<'s> = (&'s [u8], usize);

/// The object at the cursor (consumed) against the expected object `eo`: where the value of
/// each expected key starts (its last duplicate; `usize::MAX` when absent) and, when `exact`,
/// the other keys in first-occurrence order with where their last duplicate's value starts.
/// `None` for an escaped extra key (the caller falls back to the parsed comparison).
fn object_keys<'s>(
    eo: &Object,
    c: &mut Cur<'s>,
    exact: bool,
) -> Option<(Vec<usize>, Vec<ExtraKey<'s>>)> {
    let mut last = vec![usize::MAX; eo.len()];
    let mut extra: Vec<ExtraKey<'s>> = Vec::new();
    if c.open() {
        loop {
            let (body, escaped) = c.key();
            match eo.iter().position(|(k, _)| str_eq(body, escaped, k.as_bytes())) {
                Some(j) => last[j] = c.i,
                None if exact => {
                    if escaped {
                        return None;
                    }
                    match extra.iter_mut().find(|(b, _)| *b == body) {
                        Some(x) => x.1 = c.i,
                        None => extra.push((body, c.i)),
                    }
                }
                None => {}
            }
            c.skip();
            if !c.next() {
                break;
            }
        }
    }
    Some((last, extra))
}

/// The number of differences `compare::Differ::walk` counts between `e` and the value at the
/// cursor (consumed).
fn count(e: &Value, c: &mut Cur<'_>, mode: Mode, top: bool) -> Option<usize> {
    match (e, c.peek()) {
        (Value::Object(eo), b'{') => {
            let exact = mode == Mode::Exact;
            let child_mode = if mode == Mode::Subset && top { Mode::Exact } else { mode };
            let (last, extra) = object_keys(eo, c, exact)?;
            let mut n = extra.len();
            for ((_, ev), &at) in eo.iter().zip(&last) {
                n += if at == usize::MAX {
                    1
                } else {
                    count(ev, &mut Cur { s: c.s, i: at }, child_mode, false)?
                };
            }
            Some(n)
        }
        (Value::Array(ea), b'[') if mode != Mode::Subset || !top => {
            let mut n = 0;
            let mut k = 0;
            if c.open() {
                loop {
                    match ea.get(k) {
                        Some(ev) => n += count(ev, c, mode, false)?,
                        None => c.skip(),
                    }
                    k += 1;
                    if !c.next() {
                        break;
                    }
                }
            }
            Some(n + k.abs_diff(ea.len()))
        }
        _ => {
            let same = eq(e, &mut Cur { s: c.s, i: c.i });
            c.skip();
            Some(usize::from(!same))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: the grammar of parse.rs, position for position, without building anything.

struct Validator<'a> {
    s: &'a [u8],
    i: usize,
    max_depth: usize,
}

/// The offset of the first value when `s` is one valid JSON text; `None` otherwise.
pub fn validate(s: &[u8], max_depth: usize) -> Option<usize> {
    let mut v = Validator { s, i: 0, max_depth };
    v.ws();
    let start = v.i;
    v.value(0)?;
    v.ws();
    (v.i == s.len()).then_some(start)
}

/// [`validate`] that also indexes a top-level object: `last[j]` becomes the offset of the value
/// of `keys`' `j`-th key (the last duplicate wins; untouched when absent). `Some((start,
/// is_object))` exactly when [`validate`] gives `Some(start)`.
pub fn validate_indexed(
    s: &[u8],
    max_depth: usize,
    keys: &Object,
    last: &mut [usize],
) -> Option<(usize, bool)> {
    let mut v = Validator { s, i: 0, max_depth };
    v.ws();
    let start = v.i;
    if s.get(start) != Some(&b'{') {
        v.value(0)?;
        v.ws();
        return (v.i == s.len()).then_some((start, false));
    }
    // `Validator::object(1)`, looking each key up.
    if max_depth < 1 {
        return None;
    }
    v.i += 1;
    v.ws();
    if s.get(v.i) == Some(&b'}') {
        v.i += 1;
    } else {
        loop {
            v.ws();
            if s.get(v.i) != Some(&b'"') {
                return None;
            }
            let from = v.i + 1;
            let escaped = v.string()?;
            let body = &s[from..v.i - 1];
            v.ws();
            if s.get(v.i) != Some(&b':') {
                return None;
            }
            v.i += 1;
            v.ws();
            if let Some(j) = keys.iter().position(|(k, _)| str_eq(body, escaped, k.as_bytes())) {
                last[j] = v.i;
            }
            v.value(1)?;
            v.ws();
            match s.get(v.i)? {
                b',' => v.i += 1,
                b'}' => {
                    v.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    v.ws();
    (v.i == s.len()).then_some((start, true))
}

/// SUBSET or PARTIAL of the object `expected` against the top-level object of valid `text`
/// whose values [`validate_indexed`] located in `last`: what [`matches_valid`] answers.
pub fn matches_indexed(expected: &Object, text: &str, last: &[usize], mode: Mode) -> bool {
    let value = if mode == Mode::Partial { partial } else { eq };
    expected
        .iter()
        .zip(last)
        .all(|((_, ev), &at)| at != usize::MAX && value(ev, &mut Cur { s: text.as_bytes(), i: at }))
}

impl Validator<'_> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match *self.s.get(self.i)? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > self.max_depth {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return None;
            }
            self.string()?;
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return None;
            }
            self.i += 1;
            self.ws();
            self.value(depth)?;
            self.ws();
            match self.s.get(self.i)? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > self.max_depth {
            return None;
        }
        self.i += 1;
        self.ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            self.value(depth)?;
            self.ws();
            match self.s.get(self.i)? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn digits(&mut self) {
        while matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn number(&mut self) -> Option<()> {
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        match self.s.get(self.i)? {
            b'0' => {
                self.i += 1;
                if matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                    return None;
                }
            }
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return None;
            }
            self.digits();
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return None;
            }
            self.digits();
        }
        Some(())
    }

    /// Whether the string has escapes.
    fn string(&mut self) -> Option<bool> {
        self.i += 1;
        let mut escaped = false;
        loop {
            self.i = scan_string(self.s, self.i, true);
            let b = *self.s.get(self.i)?;
            self.i += 1;
            match b {
                b'"' => return Some(escaped),
                b'\\' => match *self.s.get(self.i)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                        escaped = true;
                        self.i += 1;
                    }
                    b'u' => {
                        escaped = true;
                        let hex = self.s.get(self.i + 1..self.i + 5)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        self.i += 5;
                    }
                    _ => return None,
                },
                0..=0x1F => return None,
                _ => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Comparison on validated text. Each function consumes the value at the cursor when it returns
// true; after `false` the cursor is meaningless (every caller stops).

struct Cur<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    #[inline]
    fn ws(&mut self) {
        while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> u8 {
        self.s[self.i]
    }

    /// Skips a string; returns its contents (between the quotes) and whether it has escapes.
    #[inline]
    fn string(&mut self) -> (&'a [u8], bool) {
        self.i += 1;
        let start = self.i;
        let mut escaped = false;
        loop {
            self.i = scan_string(self.s, self.i, false);
            match self.s[self.i] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    self.i += 2;
                }
                _ => self.i += 1,
            }
        }
        let body = &self.s[start..self.i];
        self.i += 1;
        (body, escaped)
    }

    /// Skips one (valid) value.
    fn skip(&mut self) {
        match self.peek() {
            b'"' => {
                self.string();
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    // Structural bytes only; everything else is passed over quickly.
                    while !STRUCTURAL[usize::from(self.s[self.i])] {
                        self.i += 1;
                    }
                    match self.s[self.i] {
                        b'"' => {
                            self.string();
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return;
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while self.i < self.s.len()
                    && !matches!(self.s[self.i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    self.i += 1;
                }
            }
        }
    }

    /// After a value inside a container: true if another element follows (consumes `,`), false
    /// at the end (consumes the closing bracket).
    #[inline]
    fn next(&mut self) -> bool {
        self.ws();
        let more = self.s[self.i] == b',';
        self.i += 1;
        self.ws();
        more
    }

    /// After an opening bracket: false for an empty container (consumes the closing one).
    #[inline]
    fn open(&mut self) -> bool {
        self.i += 1;
        self.ws();
        if matches!(self.s[self.i], b'}' | b']') {
            self.i += 1;
            false
        } else {
            true
        }
    }

    /// Reads `"key" :` and leaves the cursor on the value.
    fn key(&mut self) -> (&'a [u8], bool) {
        let k = self.string();
        self.ws();
        self.i += 1; // ':'
        self.ws();
        k
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The offset of the first byte at or after `i` that is `"` or `\\` (or, with `control`, below
/// 0x20); `s.len()` when there is none. Eight bytes at a time: in each mask below, the lowest
/// flagged byte is exact (borrows only disturb the bytes above it), which is the one taken.
#[inline]
fn scan_string(s: &[u8], mut i: usize, control: bool) -> usize {
    while let Some(chunk) = s.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let w = u64::from_le_bytes(w);
        let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
        let mut m = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
        if control {
            m |= w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
        }
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = s.get(i) {
        if b == b'"' || b == b'\\' || (control && b < 0x20) {
            break;
        }
        i += 1;
    }
    i
}

/// `"`, `{`, `[`, `}`, `]`: the bytes a container skip must look at.
static STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'[' as usize] = true;
    t[b'}' as usize] = true;
    t[b']' as usize] = true;
    t
};

/// Decoded string bytes (WTF-8) equal `want`.
#[inline]
fn str_eq(body: &[u8], escaped: bool, want: &[u8]) -> bool {
    if escaped {
        escaped_str_eq(body, want)
    } else {
        body == want
    }
}

/// [`str_eq`] for a body with escapes (rare): decoded with the parser.
#[cold]
fn escaped_str_eq(body: &[u8], want: &[u8]) -> bool {
    // The quotes around `body` are in the text.
    let mut quoted = Vec::with_capacity(body.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(body);
    quoted.push(b'"');
    let text = std::str::from_utf8(&quoted).unwrap_or_default();
    match super::parse(text, 1) {
        Ok(Value::String(s)) => s.as_bytes() == want,
        _ => false,
    }
}

/// Deep equality of `e` with the value at the cursor (SPEC §2).
fn eq(e: &Value, c: &mut Cur<'_>) -> bool {
    match (e, c.peek()) {
        (Value::Object(eo), b'{') => object_match(eo, c, true, eq),
        (Value::Array(ea), b'[') => array_match(ea, c, eq),
        (Value::String(es), b'"') => {
            let (body, escaped) = c.string();
            str_eq(body, escaped, es.as_bytes())
        }
        (Value::Number(n), b'-' | b'0'..=b'9') => {
            let start = c.i;
            c.skip();
            number_eq(n, &c.s[start..c.i])
        }
        (Value::Bool(true), b't') | (Value::Null, b'n') => {
            c.i += 4;
            true
        }
        (Value::Bool(false), b'f') => {
            c.i += 5;
            true
        }
        _ => false,
    }
}

/// PARTIAL: objects as SUBSET recursing, arrays same length element-wise, scalars deep-equal.
fn partial(e: &Value, c: &mut Cur<'_>) -> bool {
    match (e, c.peek()) {
        (Value::Object(eo), b'{') => object_match(eo, c, false, partial),
        (Value::Array(ea), b'[') => array_match(ea, c, partial),
        (Value::Object(_) | Value::Array(_), _) => false,
        _ => eq(e, c),
    }
}

fn array_match(ea: &[Value], c: &mut Cur<'_>, elem: fn(&Value, &mut Cur<'_>) -> bool) -> bool {
    let mut k = 0;
    if c.open() {
        loop {
            let Some(ev) = ea.get(k) else { return false };
            if !elem(ev, c) {
                return false;
            }
            k += 1;
            if !c.next() {
                break;
            }
        }
    }
    k == ea.len()
}

/// Objects. `exact`: the key sets must be equal (and `value` is deep equality); otherwise every
/// expected key must be present with a value for which `value` holds. The last duplicate of a
/// key wins.
fn object_match(
    eo: &Object,
    c: &mut Cur<'_>,
    exact: bool,
    value: fn(&Value, &mut Cur<'_>) -> bool,
) -> bool {
    const INLINE: usize = 8;
    let n = eo.len();
    let mut inline = [usize::MAX; INLINE];
    let mut heap = Vec::new();
    let last: &mut [usize] = if n <= INLINE {
        &mut inline[..n]
    } else {
        heap.resize(n, usize::MAX);
        &mut heap
    };
    if c.open() {
        loop {
            let (body, escaped) = c.key();
            match eo.iter().position(|(k, _)| str_eq(body, escaped, k.as_bytes())) {
                Some(j) => last[j] = c.i,
                None if exact => return false,
                None => {}
            }
            c.skip();
            if !c.next() {
                break;
            }
        }
    }
    let end = c.i;
    for ((_, ev), &at) in eo.iter().zip(last.iter()) {
        if at == usize::MAX || !value(ev, &mut Cur { s: c.s, i: at }) {
            return false;
        }
    }
    c.i = end;
    true
}

/// `n` equals the number written as `raw` (valid JSON number text), normalised exactly as
/// `Number::from_json_text` does, without allocating.
fn number_eq(n: &Number, raw: &[u8]) -> bool {
    let (negative, rest) = match raw.split_first() {
        Some((b'-', r)) => (true, r),
        _ => (false, raw),
    };
    let (mantissa, exp_text) = match rest.iter().position(|&b| b == b'e' || b == b'E') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut exponent: i64 = if exp_text.is_empty() {
        0
    } else {
        let t = std::str::from_utf8(exp_text).unwrap_or("0");
        t.parse::<i64>().unwrap_or(if t.starts_with('-') { i64::MIN / 2 } else { i64::MAX / 2 })
    };
    let (int_part, frac_part) = match mantissa.iter().position(|&b| b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &[][..]),
    };
    exponent = exponent.saturating_sub(frac_part.len() as i64);
    let total = int_part.len() + frac_part.len();
    let at =
        |k: usize| if k < int_part.len() { int_part[k] } else { frac_part[k - int_part.len()] };
    let lead = (0..total).take_while(|&k| at(k) == b'0').count();
    let trail = (lead..total).rev().take_while(|&k| at(k) == b'0').count();
    let sig = total - lead - trail;
    exponent = exponent.saturating_add(trail as i64);
    let is_zero = sig == 0;
    let digits = n.digits().as_bytes();
    n.is_negative() == (negative && !is_zero)
        && n.exponent() == if is_zero { 0 } else { exponent }
        && digits.len() == sig
        && digits.iter().enumerate().all(|(k, &d)| at(lead + k) == d)
}

#[cfg(test)]
mod tests {
    use super::{
        diff_count_text, diff_valid, matches_indexed, matches_text, validate, validate_indexed,
    };
    use crate::json::compare::{diff, matches, Mode};
    use crate::json::parse;

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % n as u64) as usize
        }
        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }
    }

    const WS: &[&str] = &["", "", "", " ", "\n\t", "\r"];
    const NUMS: &[&str] = &[
        "0",
        "-0",
        "1",
        "1.0",
        "10e-1",
        "1e0",
        "100",
        "1E2",
        "0.1",
        "5000",
        "5e3",
        "5000.00",
        "-5000",
        "9007199254740993",
        "9007199254740992",
        "1e400",
        "1e-400",
        "0.0e5",
        "12.50",
        "1e99999999999999999999",
        "-1e-99999999999999999999",
    ];
    const STRS: &[&str] = &[
        r#""a""#,
        r#""\u0061""#,
        r#""b""#,
        r#""""#,
        r#""\ud800""#,
        r#""\ud83d\ude00""#,
        "\"\u{1F600}\"",
        r#""a\"b""#,
        r#""\/""#,
        "\"é\"",
        r#""\u00e9""#,
    ];
    const KEYS: &[&str] = &[r#""a""#, r#""b""#, r#""\u0061""#, r#""c""#, r#""""#];

    fn gen(r: &mut Rng, depth: usize) -> String {
        let ws = |r: &mut Rng| r.pick(WS).to_owned();
        match r.below(if depth > 3 { 4 } else { 7 }) {
            0 | 3 => r.pick(NUMS).to_owned(),
            1 => r.pick(STRS).to_owned(),
            2 => r.pick(&["true", "false", "null"]).to_owned(),
            4 | 5 => {
                let n = r.below(4);
                let items: Vec<String> = (0..n)
                    .map(|_| {
                        let k = r.pick(KEYS);
                        format!("{}{k}{}:{}{}", ws(r), ws(r), ws(r), gen(r, depth + 1))
                    })
                    .collect();
                format!("{{{}{}}}", items.join(","), ws(r))
            }
            _ => {
                let n = r.below(4);
                let items: Vec<String> =
                    (0..n).map(|_| format!("{}{}{}", ws(r), gen(r, depth + 1), ws(r))).collect();
                format!("[{}]", items.join(","))
            }
        }
    }

    fn mutate(r: &mut Rng, t: &str) -> String {
        let b = t.as_bytes();
        match r.below(8) {
            0 if !b.is_empty() => String::from_utf8_lossy(&b[..r.below(b.len())]).into_owned(),
            1 => {
                let at = r.below(b.len() + 1);
                let junk = r.pick(&[",", "}", "]", "\"", "x", "0", "\\", "\u{1}", " ", "-", "."]);
                let mut s = String::from_utf8_lossy(&b[..at]).into_owned();
                s.push_str(junk);
                s.push_str(&String::from_utf8_lossy(&b[at..]));
                s
            }
            2 => format!("{t} {t}"),
            _ => t.to_owned(),
        }
    }

    #[test]
    fn validation_accepts_exactly_what_parse_accepts() {
        let mut r = Rng(7);
        for depth_limit in [3, 128] {
            for _ in 0..20_000 {
                let g = gen(&mut r, 0);
                let t = mutate(&mut r, &g);
                let ok = parse(&t, depth_limit).is_ok();
                assert_eq!(validate(t.as_bytes(), depth_limit).is_some(), ok, "{t:?}");
                let keys = crate::json::Object::new();
                assert_eq!(
                    validate_indexed(t.as_bytes(), depth_limit, &keys, &mut []).is_some(),
                    ok
                );
            }
        }
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(validate(deep(128).as_bytes(), 128).is_some());
        assert!(validate(deep(129).as_bytes(), 128).is_none());
    }

    #[test]
    fn text_matching_agrees_with_value_matching() {
        let mut r = Rng(11);
        let mut agreed = [0usize; 2];
        let mut counted = 0usize;
        let mut described = 0usize;
        for _ in 0..40_000 {
            let expected = gen(&mut r, 1);
            let actual = if r.below(3) == 0 { expected.clone() } else { gen(&mut r, 1) };
            let (Ok(e), Ok(a)) = (parse(&expected, 128), parse(&actual, 128)) else { continue };
            for mode in [Mode::Exact, Mode::Subset, Mode::Partial] {
                if mode == Mode::Subset && e.as_object().is_none() {
                    continue;
                }
                let want = matches(&e, &a, mode);
                let got = matches_text(&e, &actual, mode, 128);
                assert_eq!(got, Some(want), "{mode:?} {expected} vs {actual}");
                if let Some(n) = diff_count_text(&e, &actual, mode, 128) {
                    assert_eq!(n, diff(&e, &a, mode).count, "{mode:?} {expected} vs {actual}");
                    counted += 1;
                }
                let start = validate(actual.as_bytes(), 128).expect("valid");
                if let (Some(eo), Mode::Subset | Mode::Partial) = (e.as_object(), mode) {
                    let mut last = vec![usize::MAX; eo.len()];
                    let (at, object) =
                        validate_indexed(actual.as_bytes(), 128, eo, &mut last).expect("valid");
                    assert_eq!(at, start);
                    let got = object && matches_indexed(eo, &actual, &last, mode);
                    assert_eq!(got, want, "{mode:?} {expected} vs {actual}");
                }
                if let Some(d) = diff_valid(&e, &actual, start, mode, 128) {
                    let want = diff(&e, &a, mode);
                    assert_eq!(
                        (d.count, d.first),
                        (want.count, want.first),
                        "{mode:?} {expected} vs {actual}"
                    );
                    described += 1;
                }
                agreed[usize::from(want)] += 1;
            }
        }
        assert!(agreed[0] > 1000 && agreed[1] > 1000, "{agreed:?}");
        assert!(counted > 30_000, "{counted}");
        assert!(described > 30_000, "{described}");
    }
}
