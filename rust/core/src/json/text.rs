//! EXACT / SUBSET / PARTIAL matching straight against argument text, without building a
//! `Value` for the actual side (the fast path of `args::Comparison`).
//!
//! The text is first validated by the tokenizer's walk (`lex.rs`), the grammar and depth rule
//! of `parse` (same acceptance, no allocation), then read with the tokenizer's unchecked
//! cursor; invalid text returns `None` so the caller parses it and reports
//! the parser's error. On valid text the comparison follows `compare::matches`: object keys
//! compared as decoded strings, the last duplicate key wins, numbers compared as exact
//! decimals (normalised from the text as `Number::from_json_text` does).
use std::fmt::Write;

use super::compare::{escape_non_ascii, invisible, push_key, show, Diff, Mode};
use super::lex::{self, LexError, Lexer, Literal, NumberText, Sink};
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
    let mut c = Cur::new(text.as_bytes(), start);
    match mode {
        Mode::Exact => eq(expected, &mut c),
        Mode::Subset => match expected {
            Value::Object(e) => c.byte() == b'{' && object_match(e, &mut c, false, eq),
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
    let mut c = Cur::new(text.as_bytes(), start);
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
    d.walk(expected, &mut Cur::new(text.as_bytes(), start), mode, true)?;
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
        match (e, c.byte()) {
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
                        self.walk(ev, &mut Cur::new(c.s, at), child_mode, false)?;
                    }
                    self.path.truncate(len);
                }
                for (body, at) in extra {
                    let len = self.path.len();
                    push_key(&mut self.path, &Str::from(std::str::from_utf8(body).ok()?));
                    self.note(|d| {
                        let mut end = Cur::new(c.s, at);
                        end.skip_valid();
                        Some(format!("{} is not expected, got {}", d.path, d.shown(at, end.i)?))
                    })?;
                    self.path.truncate(len);
                }
            }
            (Value::Array(ea), b'[') if mode != Mode::Subset || !top => {
                let mut k = 0;
                if c.valid_open() {
                    loop {
                        match ea.get(k) {
                            Some(ev) => {
                                let len = self.path.len();
                                let _ = write!(self.path, "[{k}]");
                                self.walk(ev, c, mode, false)?;
                                self.path.truncate(len);
                            }
                            None => c.skip_valid(),
                        }
                        k += 1;
                        if !c.valid_next() {
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
                let same = eq(e, &mut Cur::new(c.s, at));
                c.skip_valid();
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
    if c.valid_open() {
        loop {
            let (body, escaped) = c.valid_key();
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
            c.skip_valid();
            if !c.valid_next() {
                break;
            }
        }
    }
    Some((last, extra))
}

/// The number of differences `compare::Differ::walk` counts between `e` and the value at the
/// cursor (consumed).
fn count(e: &Value, c: &mut Cur<'_>, mode: Mode, top: bool) -> Option<usize> {
    match (e, c.byte()) {
        (Value::Object(eo), b'{') => {
            let exact = mode == Mode::Exact;
            let child_mode = if mode == Mode::Subset && top { Mode::Exact } else { mode };
            let (last, extra) = object_keys(eo, c, exact)?;
            let mut n = extra.len();
            for ((_, ev), &at) in eo.iter().zip(&last) {
                n += if at == usize::MAX {
                    1
                } else {
                    count(ev, &mut Cur::new(c.s, at), child_mode, false)?
                };
            }
            Some(n)
        }
        (Value::Array(ea), b'[') if mode != Mode::Subset || !top => {
            let mut n = 0;
            let mut k = 0;
            if c.valid_open() {
                loop {
                    match ea.get(k) {
                        Some(ev) => n += count(ev, c, mode, false)?,
                        None => c.skip_valid(),
                    }
                    k += 1;
                    if !c.valid_next() {
                        break;
                    }
                }
            }
            Some(n + k.abs_diff(ea.len()))
        }
        _ => {
            let same = eq(e, &mut Cur::new(c.s, c.i));
            c.skip_valid();
            Some(usize::from(!same))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: the tokenizer's walk (the grammar and depth rule of `parse`), building nothing.

/// Validation builds nothing.
struct Check;

impl Sink for Check {
    type Value = ();
    type Key = ();
    type Object = ();
    type Array = ();

    #[inline]
    fn string(&mut self, lx: &mut Lexer<'_>) -> Result<(), LexError> {
        lx.string(&mut ()).map(|_| ())
    }
    #[inline]
    fn key(&mut self, lx: &mut Lexer<'_>, (): &mut ()) -> Result<(), LexError> {
        lx.string(&mut ()).map(|_| ())
    }
    #[inline]
    fn number(&mut self, _: &[u8], _: &NumberText) {}
    #[inline]
    fn literal(&mut self, _: Literal) {}
    #[inline]
    fn begin_object(&mut self, _: usize) {}
    #[inline]
    fn member(&mut self, (): &mut (), (): (), _: usize, (): ()) {}
    #[inline]
    fn end_object(&mut self, (): ()) {}
    #[inline]
    fn begin_array(&mut self) {}
    #[inline]
    fn element(&mut self, (): &mut (), (): ()) {}
    #[inline]
    fn end_array(&mut self, (): ()) {}
}

/// Validation that notes, in a top-level object, where the value of each of `keys` starts.
struct Indexed<'k> {
    s: &'k [u8],
    keys: &'k Object,
    last: &'k mut [usize],
}

impl Sink for Indexed<'_> {
    type Value = ();
    /// A key's body (its offsets between the quotes) and whether it has escapes.
    type Key = (usize, usize, bool);
    /// Whether the object is the top-level one.
    type Object = bool;
    type Array = ();

    #[inline]
    fn string(&mut self, lx: &mut Lexer<'_>) -> Result<(), LexError> {
        lx.string(&mut ()).map(|_| ())
    }
    #[inline]
    fn key(&mut self, lx: &mut Lexer<'_>, _: &mut bool) -> Result<(usize, usize, bool), LexError> {
        let from = lx.i + 1;
        let escaped = lx.string(&mut ())?;
        Ok((from, lx.i - 1, escaped))
    }
    #[inline]
    fn number(&mut self, _: &[u8], _: &NumberText) {}
    #[inline]
    fn literal(&mut self, _: Literal) {}
    #[inline]
    fn begin_object(&mut self, depth: usize) -> bool {
        depth == 1
    }
    /// The last duplicate wins.
    #[inline]
    fn member(
        &mut self,
        top: &mut bool,
        (from, to, escaped): (usize, usize, bool),
        at: usize,
        (): (),
    ) {
        if *top {
            let body = &self.s[from..to];
            if let Some(j) = self.keys.iter().position(|(k, _)| str_eq(body, escaped, k.as_bytes()))
            {
                self.last[j] = at;
            }
        }
    }
    #[inline]
    fn end_object(&mut self, _: bool) {}
    #[inline]
    fn begin_array(&mut self) {}
    #[inline]
    fn element(&mut self, (): &mut (), (): ()) {}
    #[inline]
    fn end_array(&mut self, (): ()) {}
}

/// The offset of the first value when `s` is one valid JSON text; `None` otherwise.
pub fn validate(s: &[u8], max_depth: usize) -> Option<usize> {
    lex::walk(s, max_depth, &mut Check).ok().map(|(start, ())| start)
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
    let (start, ()) = lex::walk(s, max_depth, &mut Indexed { s, keys, last }).ok()?;
    Some((start, s[start] == b'{'))
}

/// SUBSET or PARTIAL of the object `expected` against the top-level object of valid `text`
/// whose values [`validate_indexed`] located in `last`: what [`matches_valid`] answers.
pub fn matches_indexed(expected: &Object, text: &str, last: &[usize], mode: Mode) -> bool {
    let value = if mode == Mode::Partial { partial } else { eq };
    expected
        .iter()
        .zip(last)
        .all(|((_, ev), &at)| at != usize::MAX && value(ev, &mut Cur::new(text.as_bytes(), at)))
}

// ---------------------------------------------------------------------------------------------
// Comparison on validated text. Each function consumes the value at the cursor when it returns
// true; after `false` the cursor is meaningless (every caller stops).

/// The cursor over validated text: the tokenizer's unchecked half.
type Cur<'a> = Lexer<'a>;

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
    match (e, c.byte()) {
        (Value::Object(eo), b'{') => object_match(eo, c, true, eq),
        (Value::Array(ea), b'[') => array_match(ea, c, eq),
        (Value::String(es), b'"') => {
            let (body, escaped) = c.valid_string();
            str_eq(body, escaped, es.as_bytes())
        }
        (Value::Number(n), b'-' | b'0'..=b'9') => c.number().is_ok_and(|t| number_eq(n, &t, c.s)),
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
    match (e, c.byte()) {
        (Value::Object(eo), b'{') => object_match(eo, c, false, partial),
        (Value::Array(ea), b'[') => array_match(ea, c, partial),
        (Value::Object(_) | Value::Array(_), _) => false,
        _ => eq(e, c),
    }
}

fn array_match(ea: &[Value], c: &mut Cur<'_>, elem: fn(&Value, &mut Cur<'_>) -> bool) -> bool {
    let mut k = 0;
    if c.valid_open() {
        loop {
            let Some(ev) = ea.get(k) else { return false };
            if !elem(ev, c) {
                return false;
            }
            k += 1;
            if !c.valid_next() {
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
    if c.valid_open() {
        loop {
            let (body, escaped) = c.valid_key();
            match eo.iter().position(|(k, _)| str_eq(body, escaped, k.as_bytes())) {
                Some(j) => last[j] = c.i,
                None if exact => return false,
                None => {}
            }
            c.skip_valid();
            if !c.valid_next() {
                break;
            }
        }
    }
    let end = c.i;
    for ((_, ev), &at) in eo.iter().zip(last.iter()) {
        if at == usize::MAX || !value(ev, &mut Cur::new(c.s, at)) {
            return false;
        }
    }
    c.i = end;
    true
}

/// `n` equals the number `t` of the text `s`, normalised exactly as `Number::from_json_text`
/// does, without allocating.
#[inline]
fn number_eq(n: &Number, t: &NumberText, s: &[u8]) -> bool {
    let d = t.decimal(s);
    n.is_negative() == d.negative
        && n.exponent() == d.exponent
        && d.digits_eq(n.digits().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::{
        diff_count_text, diff_valid, matches_indexed, matches_text, validate, validate_indexed,
    };
    use crate::json::compare::{diff, matches, Mode};
    use crate::json::parse;

    use crate::test_rng::{self, JsonVocab, Rng};

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

    const VOCAB: JsonVocab<'static> = JsonVocab {
        ws: WS,
        numbers: NUMS,
        strings: STRS,
        keys: KEYS,
        words: &["true", "false", "null"],
        leaf_depth: 3,
    };
    const JUNK: &[&str] = &[",", "}", "]", "\"", "x", "0", "\\", "\u{1}", " ", "-", "."];

    fn gen(r: &mut Rng, depth: usize) -> String {
        VOCAB.text(r, depth)
    }

    fn mutate(r: &mut Rng, t: &str) -> String {
        test_rng::mutate(r, t, 8, JUNK, |t| format!("{t} {t}"))
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
